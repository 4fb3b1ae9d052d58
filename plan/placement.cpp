#include "plan/placement.h"

#include <algorithm>

#include "model/kernels/cpu/precision.h"

namespace strata {

GptOptions gpt_options_of(const Config& config) {
  return GptOptions{config.precision.compute, config.recompute,
                    pipeline_schedule_splits_backward(config.parallel.pipeline_schedule),
                    config.parallel.cp_comm, config.precision.fp8};
}

ShardingOptions sharding_options(const ZeroConfig& zero) {
  return ShardingOptions{zero.gradient_reduction, zero.quantized_weights,
                         zero.hierarchical_partition, zero.quantized_gradients};
}

std::size_t reduction_scratch_floats(const std::vector<RangeReduction>& ops,
                                     const ProcessGroups& groups) {
  return reduction_scratch_floats(
      ops, MeshShape{groups.tp().size(), groups.pp().size(), groups.dp().size(),
                     groups.ep() != nullptr ? groups.ep()->size() : 1,
                     groups.cp() != nullptr ? groups.cp()->size() : 1});
}

std::size_t reduction_scratch_floats(const std::vector<RangeReduction>& ops,
                                     const MeshShape& mesh) {
  std::size_t most = 0;
  for (const RangeReduction& op : ops) {
    if (op.kind == RangeReduction::Kind::tied_exchange) most = std::max(most, op.range.size());
    if (op.kind == RangeReduction::Kind::reduce_scatter) {
      most = std::max(most, op.range.size() / static_cast<std::size_t>(axis_size(mesh, op.axis)));
    }
  }
  return most;
}

ReductionPlacement reduction_placement(const Config& config, const GptShape& shape,
                                       const MeshShape& mesh, int tp_rank, int stage, int dp_rank,
                                       int cp_rank) {
  // The weights' replicas are the dp × cp ranks of a (tp, pp) position, dp_cp's members in
  // world-rank order (mesh.h): this rank is member dp_rank·cp + cp_rank.
  ReductionPlacement placement{model_partition(config, mesh, tp_rank, stage),
                               dp_rank * mesh.cp + cp_rank,
                               mesh.dp * mesh.cp,
                               stage,
                               mesh.pp,
                               config.parallel.zero.stage};
  ModelPartition& p = placement.partition;
  p.ep_rank = dp_rank % p.ep_size;
  p.context = {mesh.cp, cp_rank};
  placement.tied_embeddings = shape.arch.tie_embeddings;
  // The other end holds the tied wte too.
  if (placement.tied_embeddings && mesh.pp > 1 && p.has_embedding != p.has_head) {
    const int peer = p.has_embedding ? mesh.pp - 1 : 0;
    placement.tied_peer_total =
        ParameterLayout::for_partition(shape, model_partition(config, mesh, tp_rank, peer)).total();
  }
  return placement;
}

ModelPartition model_partition(const Config& config, const MeshShape& mesh, int tp_rank,
                               int stage) {
  const int chunks = config.parallel.virtual_stages, virtual_stages = mesh.pp * chunks;
  const PipelineLayout layout = pipeline_schedule_layout(config.parallel.pipeline_schedule, chunks);
  const auto ranges =
      stage_layer_ranges(config.model.n_layer, virtual_stages, config.parallel.pp_layers);
  ModelPartition p;
  p.tp_rank = tp_rank;
  p.tp_size = mesh.tp;
  for (int c = 0; c < chunks; ++c) {
    const auto& [begin, end] =
        ranges[static_cast<std::size_t>(pipeline_virtual_stage(layout, mesh.pp, stage, c))];
    if (c == 0) {
      p.layer_begin = begin;
      p.layer_end = end;
    } else {
      p.later_chunks.push_back({begin, end});
    }
  }
  p.has_embedding = pipeline_stage_chunk(layout, mesh.pp, 0).stage == stage;
  p.has_head = pipeline_stage_chunk(layout, mesh.pp, virtual_stages - 1).stage == stage;
  p.sequence_parallel = config.parallel.sequence_parallel;
  p.ep_size = config.parallel.ep;
  return p;
}

}  // namespace strata
