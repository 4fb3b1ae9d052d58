#include "data/mixture.h"

#include <algorithm>
#include <cmath>

#include "data/permutation.h"
#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {
namespace {

constexpr int kShareBits = 24;  // shares in units of 2^-24
constexpr std::uint64_t kShareOne = std::uint64_t{1} << kShareBits;
// B · Q / 2^24 = Q / 2^(24 - 10): the block size is a power of two.
constexpr int kBoundaryShift = 14;
static_assert(kMixtureBlock << kBoundaryShift == kShareOne);
// n · Q_s must fit 64 bits: n < 2^40 blocks, so fewer than 2^50 samples (a run of 10^15
// sequences; none will reach it).
constexpr std::uint64_t kMaxSample = std::uint64_t{1} << 50;

// Q_0 .. Q_S of the header; empty when a weight is not a positive finite number.
std::vector<std::uint64_t> cumulative_shares(std::span<const double> weights) {
  double total = 0;
  for (const double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) return {};
    total += w;
  }
  std::vector<std::uint64_t> cumulative{0};
  double prefix = 0;
  for (std::size_t s = 0; s + 1 < weights.size(); ++s) {
    prefix += weights[s];
    // floor(x + 0.5): the same on every machine, whatever the rounding mode.
    cumulative.push_back(static_cast<std::uint64_t>(
        std::floor(prefix / total * static_cast<double>(kShareOne) + 0.5)));
  }
  cumulative.push_back(kShareOne);
  return cumulative;
}

}  // namespace

std::optional<std::size_t> mixture_weight_too_small(std::span<const double> weights) {
  const std::vector<std::uint64_t> cumulative = cumulative_shares(weights);
  for (std::size_t s = 0; s < weights.size(); ++s) {
    if (cumulative.empty()) {
      if (!(weights[s] > 0) || !std::isfinite(weights[s])) return s;
      continue;
    }
    // B · share >= 1 sample per block.
    if (cumulative[s + 1] < cumulative[s] + (kShareOne / kMixtureBlock)) return s;
  }
  return std::nullopt;
}

MixtureSchedule::MixtureSchedule(std::span<const double> weights, std::uint64_t seed)
    : seed_(seed) {
  if (weights.empty()) fail("a mixture needs at least one source");
  if (const auto bad = mixture_weight_too_small(weights))
    fail("mixture source ", *bad, " has weight ", weights[*bad],
         ": every weight must be > 0 and at least 1/", kMixtureBlock, " of the total");
  cumulative_ = cumulative_shares(weights);
}

double MixtureSchedule::share(std::size_t s) const {
  return static_cast<double>(cumulative_.at(s + 1) - cumulative_.at(s)) /
         static_cast<double>(kShareOne);
}

std::uint64_t MixtureSchedule::boundary(std::uint64_t blocks, std::size_t s) const {
  return (blocks * cumulative_[s]) >> kBoundaryShift;
}

std::uint64_t MixtureSchedule::drawn_in_blocks(std::size_t s, std::uint64_t blocks) const {
  STRATA_CHECK(s < sources() && blocks <= kMaxSample / kMixtureBlock);
  return boundary(blocks, s + 1) - boundary(blocks, s);
}

std::uint64_t MixtureSchedule::block_key(std::uint64_t block) const {
  return hash_combine(hash_combine(seed_, hash_name("strata.mixture.block")), block);
}

MixtureDraw MixtureSchedule::draw(std::uint64_t global_sample) const {
  STRATA_CHECK(global_sample < kMaxSample, "mixture sample ", global_sample);
  if (sources() == 1) return {0, global_sample};
  const std::uint64_t block = global_sample / kMixtureBlock;
  const std::uint64_t slot =
      KeyedPermutation(kMixtureBlock, block_key(block))(global_sample % kMixtureBlock);
  // start_s = U(b+1, s) - U(b, s) is non-decreasing in s, from 0 (s = 0) to B (s = S): find the
  // source whose slots [start_s, start_{s+1}) hold `slot`.
  const auto start = [&](std::size_t s) { return boundary(block + 1, s) - boundary(block, s); };
  std::size_t low = 0, high = sources();
  while (high - low > 1) {
    const std::size_t middle = (low + high) / 2;
    (start(middle) <= slot ? low : high) = middle;
  }
  return {low, drawn_in_blocks(low, block) + (slot - start(low))};
}

std::vector<std::uint64_t> MixtureSchedule::drawn_before(std::uint64_t end) const {
  STRATA_CHECK(end <= kMaxSample, "mixture sample ", end);
  const std::uint64_t blocks = end / kMixtureBlock, rest = end % kMixtureBlock;
  std::vector<std::uint64_t> drawn(sources());
  for (std::size_t s = 0; s < sources(); ++s) drawn[s] = drawn_in_blocks(s, blocks);
  if (rest == 0) return drawn;
  if (sources() == 1) {
    drawn[0] += rest;
    return drawn;
  }
  std::vector<std::uint64_t> starts(sources() + 1);
  for (std::size_t s = 0; s <= sources(); ++s)
    starts[s] = boundary(blocks + 1, s) - boundary(blocks, s);
  const KeyedPermutation permutation(kMixtureBlock, block_key(blocks));
  for (std::uint64_t j = 0; j < rest; ++j) {
    const auto after = std::upper_bound(starts.begin(), starts.end(), permutation(j));
    ++drawn[static_cast<std::size_t>(after - starts.begin()) - 1];
  }
  return drawn;
}

MixtureSampler::MixtureSampler(std::span<const TokenSource* const> sources,
                               std::span<const double> weights, int seq_len, std::uint64_t seed)
    : schedule_(weights, seed) {
  STRATA_CHECK(sources.size() == weights.size());
  samplers_.reserve(sources.size());
  for (std::size_t s = 0; s < sources.size(); ++s) {
    // One source reads as a plain split does: keyed by the run's seed.
    const std::uint64_t key =
        sources.size() == 1
            ? seed
            : hash_combine(hash_combine(seed, hash_name("strata.mixture.source")), s);
    samplers_.emplace_back(*sources[s], seq_len, key);
  }
}

void MixtureSampler::sample(std::uint64_t global_sample, std::int32_t* inputs,
                            std::int32_t* targets) const {
  const MixtureDraw draw = schedule_.draw(global_sample);
  samplers_[draw.source].sample(draw.index, inputs, targets);
}

}  // namespace strata
