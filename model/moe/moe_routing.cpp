#include "model/moe/moe_routing.h"

#include <algorithm>
#include <cstddef>

#include "model/core/error.h"

namespace strata {

MoeRouting route_tokens(const int* choices, int tokens, int top_k, int experts, int group_tokens,
                        std::int64_t capacity) {
  STRATA_CHECK(top_k >= 1 && top_k <= experts, "top_k ", top_k, " of ", experts, " experts");
  STRATA_CHECK(group_tokens >= 1 && tokens % group_tokens == 0, tokens,
               " tokens do not split into groups of ", group_tokens);
  MoeRouting r;
  r.tokens = tokens;
  r.top_k = top_k;
  r.experts = experts;
  const std::size_t n = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(top_k);
  r.expert.assign(choices, choices + n);
  r.kept.assign(n, 0);
  std::vector<std::int64_t> taken(static_cast<std::size_t>(experts));
  for (int group = 0; group < tokens; group += group_tokens) {
    std::fill(taken.begin(), taken.end(), 0);
    for (int j = 0; j < top_k; ++j)
      for (int t = group; t < group + group_tokens; ++t) {
        const std::size_t a = static_cast<std::size_t>(t) * top_k + static_cast<std::size_t>(j);
        const int e = r.expert[a];
        STRATA_CHECK(0 <= e && e < experts, "token ", t, " chose expert ", e, " of ", experts);
        std::int64_t& count = taken[static_cast<std::size_t>(e)];
        if (capacity >= 0 && count >= capacity) continue;
        ++count;
        r.kept[a] = 1;
      }
  }
  // Counting sort by expert; scanning assignments in order keeps each expert's in token order.
  r.offsets.assign(static_cast<std::size_t>(experts) + 1, 0);
  for (std::size_t a = 0; a < n; ++a)
    if (r.kept[a]) ++r.offsets[static_cast<std::size_t>(r.expert[a]) + 1];
  for (int e = 0; e < experts; ++e)
    r.offsets[static_cast<std::size_t>(e) + 1] += r.offsets[static_cast<std::size_t>(e)];
  r.assignments.resize(static_cast<std::size_t>(r.offsets.back()));
  std::vector<int> next(r.offsets.begin(), r.offsets.end() - 1);
  for (std::size_t a = 0; a < n; ++a)
    if (r.kept[a])
      r.assignments[static_cast<std::size_t>(next[static_cast<std::size_t>(r.expert[a])]++)] =
          static_cast<int>(a);
  return r;
}

int capacity_group_tokens(int tokens, int seq_len, int group_sequences) {
  STRATA_CHECK(seq_len >= 1 && group_sequences >= 1, "capacity groups of ", group_sequences,
               " sequences of ", seq_len, " tokens");
  const int sequences = tokens / seq_len;
  return (sequences % group_sequences == 0 ? group_sequences : sequences) * seq_len;
}

std::vector<double> chosen_shares(const int* choices, int tokens, int top_k, int experts) {
  std::vector<double> share(static_cast<std::size_t>(experts), 0.0);
  const std::size_t n = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(top_k);
  for (std::size_t a = 0; a < n; ++a)
    share[static_cast<std::size_t>(choices[a])] += 1.0 / (double(tokens) * top_k);
  return share;
}

}  // namespace strata
