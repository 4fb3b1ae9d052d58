// Where a rank's part of the model sits under a config's layout, and the options and scratch its
// backend derives from the config: the functions both the training backends
// (train/backend/training_backend.h) and the planner's predictions call, so that the two agree
// exactly.
#pragma once

#include <cstddef>
#include <vector>

#include "model/gpt.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/process_groups.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/zero/sharded_parameters.h"
#include "plan/config.h"

namespace strata {

// Floats of scratch the largest single operation of `ops` needs on this rank: a reduce-scatter's
// chunk, a tied exchange's received range.
std::size_t reduction_scratch_floats(const std::vector<RangeReduction>& ops,
                                     const ProcessGroups& groups);
// The same from the mesh's axis sizes alone (the planner's prediction).
std::size_t reduction_scratch_floats(const std::vector<RangeReduction>& ops, const MeshShape& mesh);

// The part of the model that the ranks of pipeline stage `stage` and tensor-parallel rank
// `tp_rank` hold under `config`'s layout on a mesh of `mesh` (under expert parallelism, as ep rank
// 0: the ep ranks' partitions differ in which experts they hold only).
ModelPartition model_partition(const Config& config, const MeshShape& mesh, int tp_rank, int stage);
// That rank's place for its reduction plan (dp rank `dp_rank`, so ep rank dp_rank % ep; context
// rank `cp_rank`, its rows of each sequence), with the tied wte's peer total on a pipeline end.
// The plan's data-parallel axis is the weights' replicas, dp × cp (ProcessGroups::dp_cp).
ReductionPlacement reduction_placement(const Config& config, const GptShape& shape,
                                       const MeshShape& mesh, int tp_rank, int stage, int dp_rank,
                                       int cp_rank = 0);

// The model options precision.compute and recompute ask for.
GptOptions gpt_options_of(const Config& config);

// How sharded weights and gradients move (parallel/zero/sharded_parameters.h): parallel.zero's
// gradient_reduction and ZeRO++ switches (over ProcessGroups::sharding()).
ShardingOptions sharding_options(const ZeroConfig& zero);

}  // namespace strata
