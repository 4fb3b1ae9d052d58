// Rebalancing a swarm's stages (docs/ARCHITECTURE.md §2 "SWARM"): which peer, if any, moves from
// the best-provisioned stage to the bottleneck. Pure: every peer computes it from the same
// registry records (parallel/swarm/stage_registry.h) and only the chosen peer acts, so one peer
// moves at a time without a lock.
//
// A stage's throughput is the sum of its live peers' published samples per second (a peer that has
// published none counts as its stage's measured mean; a stage none of whose peers has published is
// not judged, nor is any move made while one is unjudged; a stage without peers has throughput 0,
// so a stage whose last peer died gets the next peer that can be spared). The bottleneck is the
// stage of least throughput; the donor the stage of most throughput among those of two peers or
// more. The donor's newest peer (highest id) moves when the donor, without it, keeps more than (1 +
// margin) times the bottleneck's throughput: the slowest stage's rate can then only rise, and the
// margin keeps noise from moving peers back and forth. Stages below `first_stage` take no part (the
// first stage's peers drive: they read the data, and a driver is added by starting one).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "parallel/swarm/stage_registry.h"

namespace strata {

// A stage's live peers and their summed throughput (unjudged when it has peers and none has
// published).
struct StageLoad {
  int peers = 0;
  double samples_per_second = 0;
  bool judged = false;
};
std::vector<StageLoad> stage_loads(const std::vector<SwarmPeerRecord>& peers, int stages);

struct StageMove {
  std::int64_t peer = -1;
  int from = -1;
  int to = -1;
  bool operator==(const StageMove&) const = default;
};
std::optional<StageMove> choose_stage_move(const std::vector<SwarmPeerRecord>& peers, int stages,
                                           int first_stage, double margin = 0.1);

}  // namespace strata
