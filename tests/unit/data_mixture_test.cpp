// The mixture contract of data/mixture.h: drawn proportions match the weights (exactly per block,
// within one sample over any prefix of blocks), every source's draws are numbered without gaps
// or repeats, a sample is a pure function of (seed, g), and one source reads what a plain split
// reads.
#include "data/mixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "model/core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;
constexpr std::uint64_t B = kMixtureBlock;

// Weight sets: awkward shares (716.8 of 1024), thirds, many sources, and the smallest share.
const std::vector<std::vector<double>> kWeightSets{
    {0.7, 0.3}, {1, 1, 1}, {5, 3, 1, 0.5, 0.25}, {1, 1023}, {2.5, 1e-3, 7}};

// Each source's count in every block, by draw() over the block.
std::vector<std::uint64_t> counts_in_block(const MixtureSchedule& schedule, std::uint64_t block) {
  std::vector<std::uint64_t> counts(schedule.sources());
  for (std::uint64_t j = 0; j < B; ++j) ++counts[schedule.draw(block * B + j).source];
  return counts;
}

TEST(MixtureSchedule, EveryBlockHoldsEachSourceAtItsWeight) {
  for (const auto& weights : kWeightSets) {
    if (mixture_weight_too_small(weights)) continue;  // {2.5, 1e-3, 7}: the refused case
    const MixtureSchedule schedule(weights, 11);
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    std::vector<std::uint64_t> cumulative(weights.size());
    for (std::uint64_t block = 0; block < 40; ++block) {
      const std::vector<std::uint64_t> counts = counts_in_block(schedule, block);
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}), B);
      for (std::size_t s = 0; s < weights.size(); ++s) {
        // The realised share: the weight's, to 2^-24.
        EXPECT_NEAR(schedule.share(s), weights[s] / total, 0x1p-24);
        const double expected = B * schedule.share(s);
        // Per block: within 2 samples of B·p (header: "c_s(b) is within 2 of B·p_s").
        EXPECT_LT(std::abs(static_cast<double>(counts[s]) - expected), 2.0)
            << "source " << s << " block " << block;
        cumulative[s] += counts[s];
        // Any prefix of whole blocks: within one sample of n·B·p, and as drawn_in_blocks says.
        EXPECT_LT(std::abs(static_cast<double>(cumulative[s]) - (block + 1) * expected), 1.0)
            << "source " << s << " after block " << block;
        EXPECT_EQ(cumulative[s], schedule.drawn_in_blocks(s, block + 1));
      }
    }
  }
}

TEST(MixtureSchedule, LongRunProportionsConvergeWithinOneSamplePerBlock) {
  const std::vector<double> weights{0.7, 0.2, 0.1};
  const MixtureSchedule schedule(weights, 3);
  for (std::uint64_t blocks : {1ull, 7ull, 1000ull, 123457ull, 1ull << 30}) {
    for (std::size_t s = 0; s < weights.size(); ++s) {
      const double drawn = static_cast<double>(schedule.drawn_in_blocks(s, blocks));
      const double share = drawn / static_cast<double>(blocks * B);
      // |C_s(n) - n·B·p_s| < 1 for the realised share p_s, within 2^-24 of the weight's.
      EXPECT_LT(std::abs(share - schedule.share(s)), 1.0 / static_cast<double>(blocks * B));
      EXPECT_LT(std::abs(share - weights[s]), 1.0 / static_cast<double>(blocks * B) + 0x1p-24)
          << "source " << s << ", " << blocks << " blocks";
    }
  }
}

TEST(MixtureSchedule, EachSourceDrawsEveryIndexOnceInOrderOfBlocks) {
  const MixtureSchedule schedule(std::vector<double>{5, 3, 1, 0.5, 0.25}, 8);
  const std::uint64_t blocks = 6;
  std::vector<std::vector<bool>> seen(schedule.sources());
  for (std::size_t s = 0; s < schedule.sources(); ++s)
    seen[s].assign(schedule.drawn_in_blocks(s, blocks), false);
  for (std::uint64_t g = 0; g < blocks * B; ++g) {
    const MixtureDraw draw = schedule.draw(g);
    const std::uint64_t block = g / B;
    // Block b's draws of a source are its indices [C_s(b), C_s(b+1)).
    ASSERT_GE(draw.index, schedule.drawn_in_blocks(draw.source, block));
    ASSERT_LT(draw.index, schedule.drawn_in_blocks(draw.source, block + 1));
    ASSERT_FALSE(seen[draw.source][draw.index]) << "g " << g;
    seen[draw.source][draw.index] = true;
  }
}

TEST(MixtureSchedule, DrawnBeforeCountsTheDrawsOfAnyPrefix) {
  const MixtureSchedule schedule(std::vector<double>{0.6, 0.3, 0.1}, 21);
  std::vector<std::uint64_t> counted(3);
  for (std::uint64_t g = 0; g <= 3 * B; ++g) {
    if (g % 97 == 0 || g % B == 0 || g % B == B - 1) {
      EXPECT_EQ(schedule.drawn_before(g), counted) << "g " << g;
    }
    if (g < 3 * B) ++counted[schedule.draw(g).source];
  }
}

TEST(MixtureSchedule, IsAPureFunctionOfSeedAndSample) {
  const std::vector<double> weights{0.7, 0.3};
  const MixtureSchedule a(weights, 5), again(weights, 5), other(weights, 6);
  int differ = 0;
  for (std::uint64_t g : {0ull, 3000ull, 17ull, 1ull << 40, 3000ull, 5ull}) {
    EXPECT_EQ(a.draw(g), again.draw(g));
    differ += a.draw(g) != other.draw(g) ? 1 : 0;
  }
  EXPECT_GT(differ, 2);
  // The contract pinned: changing it changes the data order of every mixed run.
  std::vector<std::size_t> sources;
  for (std::uint64_t g = 0; g < 16; ++g) sources.push_back(a.draw(g).source);
  EXPECT_EQ(sources, (std::vector<std::size_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 1}));
}

TEST(MixtureSchedule, RefusesWeightsThatCannotBeMixed) {
  EXPECT_FALSE(mixture_weight_too_small(std::vector<double>{1, 1023}).has_value());
  EXPECT_EQ(mixture_weight_too_small(std::vector<double>{2.5, 1e-3, 7}), 1u);  // 1/9500
  EXPECT_EQ(mixture_weight_too_small(std::vector<double>{1, 0}), 1u);
  EXPECT_EQ(mixture_weight_too_small(std::vector<double>{-1, 2}), 0u);
  EXPECT_EQ(mixture_weight_too_small(std::vector<double>{1, std::nan("")}), 1u);
  EXPECT_THROW(MixtureSchedule(std::vector<double>{}, 1), Error);
  EXPECT_THROW(MixtureSchedule(std::vector<double>{1, 1e-4}, 1), Error);
}

// A split whose token i is offset + i % 1000: a window's first token names its source and start.
struct OffsetSplit {
  OffsetSplit(const std::string& tag, std::int32_t offset, std::uint64_t n) : dir(tag) {
    std::vector<std::int32_t> tokens(n);
    for (std::uint64_t i = 0; i < n; ++i) tokens[i] = offset + static_cast<std::int32_t>(i % 1000);
    write_token_shard(dir / "shard_00000.h5", tokens, ShardInfo{5000, 0, ""});
    source = std::make_unique<TokenSource>(TokenSource::open(dir.str()));
  }
  TempDir dir;
  std::unique_ptr<TokenSource> source;
};

TEST(MixtureSampler, OneSourceReadsWhatThePlainSplitReads) {
  const OffsetSplit split("mixture_one", 0, 3000);
  const TokenSource* sources[] = {split.source.get()};
  const MixtureSampler mixture(sources, std::vector<double>{0.25}, 8, 77);
  const WindowSampler plain(*split.source, 8, 77);
  std::vector<std::int32_t> x(8), y(8), tx(8), ty(8);
  for (std::uint64_t g = 0; g < 2000; g += 7) {
    mixture.sample(g, x.data(), tx.data());
    plain.sample(g, y.data(), ty.data());
    ASSERT_EQ(x, y) << "g " << g;
    ASSERT_EQ(tx, ty) << "g " << g;
  }
}

TEST(MixtureSampler, EachSampleComesFromItsSourcesOwnEpochs) {
  const OffsetSplit a("mixture_a", 0, 800), b("mixture_b", 2000, 3000);
  const TokenSource* sources[] = {a.source.get(), b.source.get()};
  const MixtureSampler mixture(sources, std::vector<double>{0.7, 0.3}, 8, 5);
  // Source a has 99 windows, b 374: over 3 blocks a runs through ~21 epochs, b through ~2.5.
  std::vector<std::vector<int>> visits{std::vector<int>(99), std::vector<int>(374)};
  std::vector<std::int32_t> inputs(8), targets(8), expected(8), expected_targets(8);
  std::vector<std::uint64_t> drawn(2);
  for (std::uint64_t g = 0; g < 3 * B; ++g) {
    mixture.sample(g, inputs.data(), targets.data());
    const MixtureDraw draw = mixture.schedule().draw(g);
    EXPECT_EQ(inputs[0] >= 2000, draw.source == 1) << "g " << g;
    mixture.source_sampler(draw.source)
        .sample(draw.index, expected.data(), expected_targets.data());
    ASSERT_EQ(inputs, expected);
    ++drawn[draw.source];
    ++visits[draw.source][mixture.source_sampler(draw.source).window_of(draw.index)];
  }
  // Without replacement: every window of a source is read as often as its completed epochs say.
  for (std::size_t s = 0; s < 2; ++s) {
    const std::uint64_t windows = visits[s].size(), epochs = drawn[s] / windows;
    for (const int count : visits[s]) {
      EXPECT_GE(count, static_cast<int>(epochs));
      EXPECT_LE(count, static_cast<int>(epochs) + 1);
    }
  }
}

}  // namespace
}  // namespace strata
