// The planner's count of each optimizer's state (plan/optimizer_state.h) is what the optimizers
// hold (their state_bytes, the runs' memory account), on whole layouts, ZeRO shards of 1 to 8
// ranks and tensor-parallel slices, with the state in place, in a host arena or on disk; and the
// counts rank the optimizers as their designs say. (The 8-bit optimizer built with no groups here:
// its constructor does not communicate.)
#include <gtest/gtest.h>

#include <memory>

#include "plan/optimizer_state.h"
#include "tests/support/test_support.h"
#include "train/optimizer/optimizer.h"

namespace strata {
namespace {

const GptShape kShape{3, 4, 64, 32, 200};

std::vector<OptimizerConfig> configs() {
  std::vector<OptimizerConfig> all(6);
  all[1].name = OptimizerName::adafactor;
  all[2].name = OptimizerName::adafactor;
  all[2].adafactor.beta1 = 0.9;
  all[3].name = OptimizerName::muon;
  all[4].name = OptimizerName::adamw8bit;
  all[5].name = OptimizerName::adamw8bit;
  all[5].adamw8bit.block_size = 100;  // blocks that tensors and shards cut
  return all;
}

TEST(OptimizerState, ThePlannersCountIsWhatEachOptimizerHolds) {
  const testing::TempDir dir("optimizer_state");
  for (int tp : {1, 2}) {
    ModelPartition partition = ModelPartition::whole(kShape);
    partition.tp_size = tp;
    const ParameterLayout layout = ParameterLayout::for_partition(kShape, partition);
    for (int shards : {1, 2, 3, 8})
      for (int r = 0; r < shards; ++r)
        for (OptimizerConfig config : configs())
          for (OptimizerOffload where :
               {OptimizerOffload::none, OptimizerOffload::host, OptimizerOffload::disk}) {
            config.offload = where;
            config.offload_dir = dir.str();
            config.offload_chunk = 1024;
            const ElementRange range = layout.shard(r, shards);
            const auto optimizer = make_optimizer(layout, range, config, {});
            EXPECT_EQ(optimizer->state_bytes(), optimizer_state_bytes(layout, range, config))
                << kOptimizerNameChoices.word(config.name) << " offload "
                << kOptimizerOffloadChoices.word(where) << " tp " << tp << " shard " << r << " of "
                << shards;
          }
  }
}

TEST(OptimizerState, AdafactorMuonAndAdamW8bitKeepLessThanAdamW) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const ElementRange all{0, layout.padded_total(1)};
  const std::vector<OptimizerConfig> c = configs();
  const std::size_t adamw = optimizer_state_bytes(layout, all, c[0]);
  EXPECT_EQ(adamw, 8 * all.size());
  EXPECT_LT(optimizer_state_bytes(layout, all, c[1]), adamw / 10);              // factored
  EXPECT_LT(optimizer_state_bytes(layout, all, c[2]), adamw / 2 + adamw / 10);  // + m
  const std::size_t muon = optimizer_state_bytes(layout, all, c[3]);
  EXPECT_LT(muon, adamw);
  EXPECT_GT(muon, adamw / 2);
  // A quarter, and the scales: 24 bytes per block of 2048.
  EXPECT_GT(optimizer_state_bytes(layout, all, c[4]), adamw / 4);
  EXPECT_LT(optimizer_state_bytes(layout, all, c[4]), adamw / 4 + adamw / 100);
}

}  // namespace
}  // namespace strata
