#include "parallel/swarm/stage_rebalance.h"

#include <algorithm>

namespace strata {

std::vector<StageLoad> stage_loads(const std::vector<SwarmPeerRecord>& peers, int stages) {
  std::vector<StageLoad> loads(static_cast<std::size_t>(stages));
  std::vector<int> measured(loads.size(), 0);
  for (const SwarmPeerRecord& p : peers) {
    if (p.stage < 0 || p.stage >= stages) continue;  // between stages (moving)
    StageLoad& load = loads[static_cast<std::size_t>(p.stage)];
    load.peers += 1;
    if (p.samples_per_second > 0) {
      load.samples_per_second += p.samples_per_second;
      measured[static_cast<std::size_t>(p.stage)] += 1;
    }
  }
  for (std::size_t k = 0; k < loads.size(); ++k) {
    StageLoad& load = loads[k];
    // A stage without peers is judged: nothing passes it (the pipeline waits for it).
    load.judged = measured[k] > 0 || load.peers == 0;
    // The unmeasured peers at the measured ones' mean.
    if (measured[k] > 0) load.samples_per_second *= static_cast<double>(load.peers) / measured[k];
  }
  return loads;
}

std::optional<StageMove> choose_stage_move(const std::vector<SwarmPeerRecord>& peers, int stages,
                                           int first_stage, double margin) {
  const std::vector<StageLoad> loads = stage_loads(peers, stages);
  int bottleneck = -1, donor = -1;
  for (int k = first_stage; k < stages; ++k) {
    const StageLoad& load = loads[static_cast<std::size_t>(k)];
    if (!load.judged) return std::nullopt;
    if (bottleneck < 0 ||
        load.samples_per_second < loads[static_cast<std::size_t>(bottleneck)].samples_per_second)
      bottleneck = k;
    if (load.peers >= 2 &&
        (donor < 0 ||
         load.samples_per_second > loads[static_cast<std::size_t>(donor)].samples_per_second))
      donor = k;
  }
  if (bottleneck < 0 || donor < 0 || donor == bottleneck) return std::nullopt;
  // The donor's newest peer, and the donor's throughput without it.
  const SwarmPeerRecord* mover = nullptr;
  for (const SwarmPeerRecord& p : peers)
    if (p.stage == donor && (!mover || p.id > mover->id)) mover = &p;
  const StageLoad& from = loads[static_cast<std::size_t>(donor)];
  const double mover_speed = mover->samples_per_second > 0 ? mover->samples_per_second
                                                           : from.samples_per_second / from.peers;
  const double left = from.samples_per_second - mover_speed;
  if (left <= (1 + margin) * loads[static_cast<std::size_t>(bottleneck)].samples_per_second)
    return std::nullopt;
  return StageMove{mover->id, donor, bottleneck};
}

}  // namespace strata
