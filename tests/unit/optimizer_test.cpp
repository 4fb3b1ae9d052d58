// The optimizer on element ranges: AdamW owning a range of the flat buffer computes, bit for bit,
// what AdamW over the whole buffer computes for those elements, whatever the range's bounds
// (ZeRO shards of 1 to 8 ranks, ranges that split tensors, ranges reaching into the padding).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/parameter_layout.h"
#include "train/optimizer/optimizer.h"

namespace strata {
namespace {

const GptShape kShape{2, 2, 32, 16, 100};

OptimizerConfig adamw_config() {
  OptimizerConfig config;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.eps = 1e-8;
  config.weight_decay = 0.1;
  return config;
}

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

// Three updates of `range` of the buffer with fresh gradients; returns the parameters and moments
// of the range.
struct RangeRun {
  std::vector<float> params, m, v;
};
RangeRun run_range(const ParameterLayout& layout, ElementRange range, std::size_t buffer) {
  AdamW optimizer(layout, range, adamw_config());
  std::vector<float> params = random_values(buffer, 1);
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> grads = random_values(buffer, 100 + step);
    optimizer.update(params.data() + range.begin, grads.data() + range.begin,
                     OptimizerStep{1e-2, 0.5, step});
  }
  const auto state = optimizer.save();
  return {std::vector<float>(params.begin() + range.begin, params.begin() + range.end),
          state.at(0).values, state.at(1).values};
}

TEST(AdamWOnRanges, ARangeEqualsTheWholeBufferRestrictedToIt) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  for (int shards : {1, 2, 4, 8}) {
    const std::size_t buffer = layout.padded_total(shards);
    const RangeRun whole = run_range(layout, {0, buffer}, buffer);
    for (int r = 0; r < shards; ++r) {
      const ElementRange shard = layout.shard(r, shards);
      const RangeRun part = run_range(layout, shard, buffer);
      auto slice = [&](const std::vector<float>& all) {
        return std::vector<float>(all.begin() + shard.begin, all.begin() + shard.end);
      };
      EXPECT_EQ(part.params, slice(whole.params)) << r << " of " << shards;
      EXPECT_EQ(part.m, slice(whole.m)) << r << " of " << shards;
      EXPECT_EQ(part.v, slice(whole.v)) << r << " of " << shards;
    }
  }
}

TEST(AdamWOnRanges, DecayFollowsTheTensorsInsideTheRange) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  // A range from the middle of wte (decayed) to the middle of the first LayerNorm (not).
  const TensorView& ln = layout.at("h.0.ln1.weight");
  const ElementRange range{layout.at("wte").size / 2, ln.offset + ln.size / 2};
  const AdamW optimizer(layout, range, adamw_config());
  const std::vector<ElementRange> expected{
      {0, ln.offset - range.begin}};  // wte's second half and wpe: both decayed, merged
  EXPECT_EQ(optimizer.decayed(), expected);
}

TEST(ParameterShards, ShardsTileThePaddedBufferInAlignedEqualParts) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  for (int shards : {1, 2, 3, 4, 8}) {
    const std::size_t padded = layout.padded_total(shards);
    EXPECT_GE(padded, layout.total());
    EXPECT_LT(padded, layout.total() + shards * ParameterLayout::kShardAlignment);
    std::size_t next = 0;
    for (int r = 0; r < shards; ++r) {
      const ElementRange shard = layout.shard(r, shards);
      EXPECT_EQ(shard.begin, next);
      EXPECT_EQ(shard.size(), padded / shards);
      EXPECT_EQ(shard.begin % ParameterLayout::kShardAlignment, 0u);
      next = shard.end;
    }
    EXPECT_EQ(next, padded);
  }
}

}  // namespace
}  // namespace strata
