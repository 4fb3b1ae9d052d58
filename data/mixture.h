// A weighted mixture of training sources (config `data.train` as a list), sampled as a pure
// function of (seed, global sample index), like one source (loader.h). A contract: resume and
// every layout depend on it, and changing it changes every mixed run's data order.
//
// Weights. Source s has weight w_s > 0; its share is p_s = w_s / Σ w. Shares are held in fixed
// point: the cumulative shares P_s = Σ_{t<s} p_t are rounded to Q_s = round(P_s · 2^24), with
// Q_0 = 0 and Q_S = 2^24 exactly, so the realised share (Q_{s+1} - Q_s) / 2^24 is within 2^-24 of
// p_s and the arithmetic below is exact integer arithmetic on every machine.
//
// Counts. Samples are drawn in blocks of B = kMixtureBlock: block b holds global samples
// [b·B, b·B + B). With U(n, s) = floor(n · B · Q_s / 2^24), source s draws
//   C_s(n) = U(n, s+1) - U(n, s)        samples in the first n blocks, and
//   c_s(b) = C_s(b+1) - C_s(b)          samples in block b.
// Σ_s C_s(n) = n·B (the sum telescopes), so each block is exactly B samples; with p_s the
// realised share, |C_s(n) - n·B·p_s| < 1 for every n (two floors), so the drawn share of every
// source is exact to one sample over any prefix of whole blocks, and c_s(b) is within 2 of B·p_s.
// c_s(b) >= 0 needs B·p_s >= 1: a source must hold at least 1/B of the total weight
// (mixture_weight_too_small).
//
// Positions. Within block b, position j = g mod B is mapped by a keyed bijection π_b on [0, B)
// (permutation.h, keyed by (seed, b)) to a slot u = π_b(j). Source s owns the slots
// [start_s(b), start_{s+1}(b)) with start_s(b) = Σ_{t<s} c_t(b) = U(b+1, s) - U(b, s). The sample
// is source s's draw number k = C_s(b) + (u - start_s(b)): a source's draws are numbered 0, 1, 2, …
// without gaps or repeats, block after block.
//
// Windows. Source s's draw k is sample k of that source's own WindowSampler (loader.h: epochs
// without replacement over its windows), keyed by (seed, s). So each source runs through its
// epochs independently, at its share of the samples.
//
// One source is the plain case: its draw k is g itself and its sampler is keyed by the run's seed,
// so a one-source list reads exactly what `data.train: PATH` reads.
//
// Cost: O(log S) integer operations and one permutation evaluation per sample; counting the draws
// of a prefix of samples (drawn_before) O(S + B·log S), whatever its length.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "data/loader.h"
#include "data/token_shards.h"

namespace strata {

// Samples per block (2^10): a share below 1/1024 of the total weight would draw less than one
// sample per block.
inline constexpr std::uint64_t kMixtureBlock = 1024;

// The index of the first weight that is not > 0 (or not finite), or whose share of the total is
// below one sample per block; std::nullopt when every weight can be mixed.
std::optional<std::size_t> mixture_weight_too_small(std::span<const double> weights);

// Which source a global sample reads, and the how-manyth draw of that source it is.
struct MixtureDraw {
  std::size_t source = 0;
  std::uint64_t index = 0;
  bool operator==(const MixtureDraw&) const = default;
};

// The schedule of draws (the contract above), without any data.
class MixtureSchedule {
 public:
  // strata::Error if `weights` is empty or mixture_weight_too_small finds one.
  MixtureSchedule(std::span<const double> weights, std::uint64_t seed);

  std::size_t sources() const { return cumulative_.size() - 1; }
  // Source s's realised share of the samples (its weight's share, in 2^-24 steps).
  double share(std::size_t s) const;
  MixtureDraw draw(std::uint64_t global_sample) const;
  // Samples each source draws among the global samples [0, end).
  std::vector<std::uint64_t> drawn_before(std::uint64_t end) const;
  // C_s(n): samples source s draws in the first n blocks.
  std::uint64_t drawn_in_blocks(std::size_t s, std::uint64_t blocks) const;

 private:
  std::uint64_t boundary(std::uint64_t blocks, std::size_t s) const;  // U(n, s)
  std::uint64_t block_key(std::uint64_t block) const;

  std::vector<std::uint64_t> cumulative_;  // Q_0 .. Q_S
  std::uint64_t seed_;
};

// Training windows of a mixture: a MixtureSchedule over the sources' own WindowSamplers.
// The TokenSources must outlive the sampler and stay where they are.
class MixtureSampler {
 public:
  // `sources` and `weights` pair up; strata::Error as MixtureSchedule and WindowSampler say.
  MixtureSampler(std::span<const TokenSource* const> sources, std::span<const double> weights,
                 int seq_len, std::uint64_t seed);

  // Fills inputs[0..T) and targets[0..T) for `global_sample` from the source it draws from.
  void sample(std::uint64_t global_sample, std::int32_t* inputs, std::int32_t* targets) const;
  const MixtureSchedule& schedule() const { return schedule_; }
  const WindowSampler& source_sampler(std::size_t s) const { return samplers_.at(s); }

 private:
  MixtureSchedule schedule_;
  std::vector<WindowSampler> samplers_;
};

}  // namespace strata
