// Training windows as a pure function of (seed, global sample index), and evaluation windows
// (docs/ARCHITECTURE.md §5 "Training samples" and "Evaluation", a contract).
//
// Training: the split's N tokens hold W = floor((N - 1) / T) non-overlapping windows (T = seq_len);
// window w is tokens [w·T, w·T + T] (T + 1 tokens): inputs are its first T, targets its last T.
// Epochs are without replacement: global sample g (= step · global_batch + index in the batch)
// belongs to epoch e = g / W and takes window π_e(g mod W), where π_e is a keyed bijection on
// [0, W) (permutation.h) keyed by (seed, e). So every epoch visits every window exactly once, the
// order differs per epoch and per seed, and a sample depends only on (seed, g): no state, any
// rank computes any sample, and resume is exact.
//
// Evaluation: window i of the first n tokens is tokens [i·T, i·T + T]; i = 0 … floor((n-1)/T) - 1.
//
// Buffers `inputs` and `targets` hold T int32 token ids each. The TokenSource must outlive the
// sampler and stay where it is (the sampler keeps a pointer to it).
#pragma once

#include <cstdint>

#include "data/token_shards.h"

namespace strata {

class WindowSampler {
 public:
  // strata::Error if seq_len < 1 or the source holds fewer than seq_len + 1 tokens.
  WindowSampler(const TokenSource& source, int seq_len, std::uint64_t seed);

  // Fills inputs[0..T) and targets[0..T) (targets = inputs shifted by one) for `global_sample`.
  void sample(std::uint64_t global_sample, std::int32_t* inputs, std::int32_t* targets) const;
  // The window index (in [0, W)) that `global_sample` reads.
  std::uint64_t window_of(std::uint64_t global_sample) const;
  std::uint64_t windows_per_epoch() const { return windows_; }
  int seq_len() const { return seq_len_; }

 private:
  const TokenSource* source_;
  int seq_len_;
  std::uint64_t seed_;
  std::uint64_t windows_;
};

// Number of evaluation windows in the first n_tokens tokens (clipped to the split): floor((n-1)/T).
std::uint64_t eval_window_count(const TokenSource& source, std::uint64_t n_tokens, int seq_len);
// Evaluation window i (over the whole split); strata::Error if it does not fit in the split.
void eval_window(const TokenSource& source, std::uint64_t i, int seq_len, std::int32_t* inputs,
                 std::int32_t* targets);

}  // namespace strata
