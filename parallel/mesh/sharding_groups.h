// The groups ZeRO's sharded parameters run over (parallel/zero/sharded_parameters.h), as the
// process groups hand them out (ProcessGroups::sharding, parallel/mesh/process_groups.h): beside
// ReductionGroups (host_reduction.h), so that the mesh names its groups without reaching into
// zero/.
#pragma once

#include "parallel/comm/communicator.h"

namespace strata {

// The data-parallel group as qgZ sees it: dp rank = node · intra->size() + local, with intra the
// dp ranks of this node (rank `local`) and inter the dp ranks of the same local index (rank
// `node`).
struct NodeGroups {
  Communicator* intra = nullptr;
  Communicator* inter = nullptr;
};

// The groups sharded parameters run over (not owned): dp (under expert parallelism its expert_dp
// part, the ranks holding the same tensors), for hpZ and qgZ its node split, and under expert
// parallelism the ep group, over which a bucket's dense ranges (plan.summed_over_ep) are summed
// before the reduce-scatter.
struct ShardingGroups {
  Communicator* dp = nullptr;
  NodeGroups nodes;
  Communicator* ep = nullptr;
};

}  // namespace strata
