// One rank of a layout as the trainer builds it, from the config alone: its mesh, the model's
// shape, the partition it holds, that partition's parameter layout and its reduction plan (the
// trainer's own functions: model_partition, ParameterLayout::for_partition, reduction_placement,
// make_reduction_plan). The memory, communication and step-time models all start here.
#pragma once

#include "model/gpt_shape.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/reduction_plan.h"
#include "plan/config.h"

namespace strata {

struct RankModel {
  MeshShape mesh;
  GptShape shape;
  ModelPartition partition;
  ParameterLayout layout;
  ReductionPlan plan;
  int micro_batches = 1;  // per step (gradient accumulation, the pipeline's micro-batches)
};

// The rank at pipeline stage `stage`, tensor-parallel rank `tp_rank` and data-parallel rank
// `dp_rank` of `config` on `world_size` ranks (under DiLoCo: every worker's mesh), context rank 0.
RankModel rank_model(const Config& config, int world_size, int stage, int tp_rank, int dp_rank);

}  // namespace strata
