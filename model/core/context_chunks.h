// Where a context-parallel member's rows sit in their sequences (docs/ARCHITECTURE.md §2, "cp").
// With parallel.cp = cp > 1 every sequence of T tokens is cut into 2·cp chunks of Tc = T / (2·cp)
// and member r holds chunks r and 2·cp − 1 − r, in that order: its T_local = 2·Tc rows of each
// sequence are [chunk r | chunk 2·cp − 1 − r] (Megatron's causal load balance: every member then
// attends to the same number of keys). Everything outside attention treats the rows as any rows;
// positions (learned or rotary) and the loader need this map from a local row to its position,
// and attention its chunks (model/context_attention.h). cp = 1 is the identity: row t of a
// sequence is position t, whatever its length.
#pragma once

#include <algorithm>

#include "model/core/choice.h"
#include "model/core/error.h"

namespace strata {

// How attention's K/V blocks travel across the group (parallel.cp_comm; model/context_attention.h).
enum class ContextComm { ring, all_gather };
inline constexpr Choices kContextCommChoices{std::array{
    ChoiceWord{ContextComm::ring, "ring"}, ChoiceWord{ContextComm::all_gather, "all_gather"}}};

struct ContextChunks {
  int cp = 1;    // members of the group
  int rank = 0;  // this member

  bool split() const { return cp > 1; }
  bool operator==(const ContextChunks&) const = default;
  // Tokens per sequence on one member of sequences of seq_len.
  int local_length(int seq_len) const { return seq_len / cp; }
  // The global chunk (of 2·cp) of this member's first (half 0) or second (half 1) chunk.
  int chunk(int half) const { return half == 0 ? rank : 2 * cp - 1 - rank; }
  // The position of the first row of half `half` of a sequence of T_local rows here.
  long first_position(int half, int T_local) const {
    return split() ? static_cast<long>(chunk(half)) * (T_local / 2) : half * (T_local / 2);
  }
  // The position of local row t of a sequence of T_local rows.
  long position(long t, int T_local) const {
    if (!split()) return t;
    const long Tc = T_local / 2;
    return first_position(t < Tc ? 0 : 1, T_local) + t % Tc;
  }

  // body(offset, count, position) for the runs of consecutive positions that make up rows
  // [row_begin, row_begin + rows) of B sequences of T_local rows each (row r is row r % T_local
  // of sequence r / T_local): the run's first row relative to row_begin, its length and the
  // position of its first row.
  template <class Body>
  void for_each_run(long row_begin, long rows, int T_local, Body&& body) const {
    const long run = split() ? T_local / 2 : T_local;  // rows of consecutive positions
    for (long r = row_begin; r < row_begin + rows;) {
      const long t = r % T_local;
      const long count = std::min(run - t % run, row_begin + rows - r);
      body(r - row_begin, count, position(t, T_local));
      r += count;
    }
  }

  // The member's rows of B sequences: `local` (B, T_local) from `whole` (B, T), T = cp·T_local.
  template <class V>
  void take(const V* whole, V* local, int B, int T) const {
    STRATA_CHECK(T % (2 * cp) == 0 || !split(), "context parallelism: ", T, " tokens are not 2·",
                 cp, " equal chunks");
    const int T_local = local_length(T);
    for (int b = 0; b < B; ++b)
      for_each_run(0, T_local, T_local, [&](long offset, long count, long position) {
        const V* from = whole + static_cast<long>(b) * T + position;
        std::copy(from, from + count, local + static_cast<long>(b) * T_local + offset);
      });
  }
};

}  // namespace strata
