#include "plan/rank_model.h"

#include "model/core/error.h"
#include "plan/memory_account.h"
#include "plan/placement.h"

namespace strata {

RankModel rank_model(const Config& config, int world_size, int stage, int tp_rank, int dp_rank) {
  const MeshShape mesh = resolve_mesh(config, world_size);
  STRATA_CHECK(stage >= 0 && stage < mesh.pp && tp_rank >= 0 && tp_rank < mesh.tp && dp_rank >= 0 &&
               dp_rank < mesh.dp);
  const GptShape shape = gpt_shape_of(config.model);  // with model.moe: the experts' layout
  // As context rank 0: every member of a cp group holds as much and sends as much.
  ModelPartition partition = model_partition(config, mesh, tp_rank, stage);
  partition.context = {mesh.cp, 0};
  ParameterLayout layout = ParameterLayout::for_partition(shape, partition);
  // The reduction plan as the trainer makes it (train/trainer.cpp make_backend).
  ReductionPlan plan = make_reduction_plan(
      layout, reduction_placement(config, shape, mesh, tp_rank, stage, dp_rank));
  return RankModel{mesh,
                   shape,
                   partition,
                   std::move(layout),
                   std::move(plan),
                   config.train.global_batch / (config.train.micro_batch * mesh.dp)};
}

}  // namespace strata
