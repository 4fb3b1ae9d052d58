// Which peer moves between a swarm's stages (parallel/swarm/stage_rebalance.h): the newest peer of
// the best-provisioned stage goes to the bottleneck when the donor stays ahead of it by the margin;
// no move while a stage is unjudged, from a stage of one peer, or among the drivers' stage.
#include "parallel/swarm/stage_rebalance.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

SwarmPeerRecord peer(std::int64_t id, int stage, double speed) {
  return SwarmPeerRecord{id, stage, "tcp://127.0.0.1:" + std::to_string(4000 + id), speed};
}

TEST(SwarmRebalance, TheDonorsNewestPeerMovesToTheBottleneck) {
  // Stage 1 is throttled (20 samples/s); stage 2 has two peers of 600.
  const std::vector<SwarmPeerRecord> peers{peer(0, 0, 900), peer(1, 1, 20), peer(2, 2, 600),
                                           peer(3, 2, 600)};
  const std::vector<StageLoad> loads = stage_loads(peers, 3);
  EXPECT_EQ(loads[2].peers, 2);
  EXPECT_DOUBLE_EQ(loads[2].samples_per_second, 1200);
  EXPECT_EQ(choose_stage_move(peers, 3, 1), (StageMove{3, 2, 1}));
}

TEST(SwarmRebalance, NoMoveThatWouldMakeTheDonorTheBottleneck) {
  // Without peer 3, stage 2 keeps 600, not above 1.1 × 580.
  const std::vector<SwarmPeerRecord> peers{peer(1, 1, 580), peer(2, 2, 600), peer(3, 2, 600)};
  EXPECT_EQ(choose_stage_move(peers, 3, 1), std::nullopt);
  // A stage of one peer gives none, however fast.
  const std::vector<SwarmPeerRecord> single{peer(1, 1, 20), peer(2, 2, 5000)};
  EXPECT_EQ(choose_stage_move(single, 3, 1), std::nullopt);
}

TEST(SwarmRebalance, AStageWithoutPeersGetsOne) {
  // Stage 1's last peer died: the pipeline waits for it, whatever the others' speeds.
  const std::vector<SwarmPeerRecord> peers{peer(0, 0, 900), peer(2, 2, 30), peer(3, 2, 30)};
  EXPECT_TRUE(stage_loads(peers, 3)[1].judged);
  EXPECT_EQ(stage_loads(peers, 3)[1].samples_per_second, 0.0);
  EXPECT_EQ(choose_stage_move(peers, 3, 1), (StageMove{3, 2, 1}));
}

TEST(SwarmRebalance, UnmeasuredPeersAndTheDriversStage) {
  // A peer that has published nothing counts as its stage's measured mean.
  const std::vector<SwarmPeerRecord> some{peer(1, 1, 20), peer(2, 2, 600), peer(3, 2, 0)};
  EXPECT_DOUBLE_EQ(stage_loads(some, 3)[2].samples_per_second, 1200);
  EXPECT_EQ(choose_stage_move(some, 3, 1), (StageMove{3, 2, 1}));
  // A stage none of whose peers has published: no move yet.
  const std::vector<SwarmPeerRecord> unjudged{peer(1, 1, 0), peer(2, 2, 600), peer(3, 2, 600)};
  EXPECT_FALSE(stage_loads(unjudged, 3)[1].judged);
  EXPECT_EQ(choose_stage_move(unjudged, 3, 1), std::nullopt);
  // The drivers' stage is neither donor nor bottleneck; a peer between stages counts nowhere.
  const std::vector<SwarmPeerRecord> drivers{peer(0, 0, 5), peer(1, 0, 5), peer(2, 1, 600),
                                             peer(3, 2, 600), peer(4, -1, 0)};
  EXPECT_EQ(choose_stage_move(drivers, 3, 1), std::nullopt);
  EXPECT_EQ(stage_loads(drivers, 3)[0].peers, 2);
}

}  // namespace
}  // namespace strata
