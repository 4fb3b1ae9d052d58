#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "data/permutation.h"
#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {
namespace {

// Reads the T + 1 tokens starting at `first` once and splits them into inputs and targets.
void read_window(const TokenSource& source, std::uint64_t first, int seq_len, std::int32_t* inputs,
                 std::int32_t* targets) {
  const auto length = static_cast<std::size_t>(seq_len);
  std::vector<std::int32_t> window(length + 1);
  source.read(first, length + 1, window.data());
  std::memcpy(inputs, window.data(), length * sizeof(std::int32_t));
  std::memcpy(targets, window.data() + 1, length * sizeof(std::int32_t));
}

void check_seq_len(int seq_len) {
  if (seq_len < 1) fail("sequence length must be at least 1, got ", seq_len);
}

}  // namespace

WindowSampler::WindowSampler(const TokenSource& source, int seq_len, std::uint64_t seed)
    : source_(&source), seq_len_(seq_len), seed_(seed) {
  check_seq_len(seq_len);
  const std::uint64_t n = source.size();
  if (n < static_cast<std::uint64_t>(seq_len) + 1) {
    fail("the training split (", source.files().front(), (source.files().size() > 1 ? ", ..." : ""),
         ") holds ", n, " tokens, fewer than seq_len + 1 = ", seq_len + 1);
  }
  windows_ = (n - 1) / static_cast<std::uint64_t>(seq_len);
}

std::uint64_t WindowSampler::window_of(std::uint64_t global_sample) const {
  const std::uint64_t epoch = global_sample / windows_;
  const std::uint64_t key =
      hash_combine(hash_combine(seed_, hash_name("strata.window_sampler")), epoch);
  return KeyedPermutation(windows_, key)(global_sample % windows_);
}

void WindowSampler::sample(std::uint64_t global_sample, std::int32_t* inputs,
                           std::int32_t* targets) const {
  const std::uint64_t window = window_of(global_sample);
  read_window(*source_, window * static_cast<std::uint64_t>(seq_len_), seq_len_, inputs, targets);
}

std::uint64_t eval_window_count(const TokenSource& source, std::uint64_t n_tokens, int seq_len) {
  check_seq_len(seq_len);
  const std::uint64_t n = std::min(n_tokens, source.size());
  return n == 0 ? 0 : (n - 1) / static_cast<std::uint64_t>(seq_len);
}

void eval_window(const TokenSource& source, std::uint64_t i, int seq_len, std::int32_t* inputs,
                 std::int32_t* targets) {
  const std::uint64_t count = eval_window_count(source, source.size(), seq_len);
  if (i >= count) {
    fail("evaluation window ", i, " is outside the split's ", count, " windows of ", seq_len,
         " tokens");
  }
  read_window(source, i * static_cast<std::uint64_t>(seq_len), seq_len, inputs, targets);
}

}  // namespace strata
