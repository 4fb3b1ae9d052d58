#include "parallel/reduction_plan.h"

#include <algorithm>

#include "model/core/error.h"

namespace strata {

bool replicated_over_tp(const ModelPartition& partition, const TensorView& t) {
  return partition.tp_size > 1 && t.slice.is_whole();
}

bool is_tied_copy(const ModelPartition& partition, const TensorView& t) {
  return t.name == "wte" && !partition.has_embedding;
}

ReductionPlan make_reduction_plan(const ParameterLayout& layout,
                                  const ReductionPlacement& placement) {
  const ModelPartition& p = placement.partition;
  if (placement.zero_stage > 1) fail("parallel.zero.stage > 1 is not implemented yet");
  using Kind = RangeReduction::Kind;
  const int dp = placement.dp_size;
  const bool sharded = placement.zero_stage >= 1 && dp > 1;
  const bool tied = placement.pp_size > 1 && (p.has_embedding || p.has_head);
  ReductionPlan plan;
  const std::size_t total =
      sharded && tied ? std::max(layout.total(), placement.tied_peer_total) : layout.total();
  plan.sharded = sharded;
  plan.buffer_size = ParameterLayout::padded_size(total, sharded ? dp : 1);
  plan.owned = sharded ? ParameterLayout::shard_of(total, placement.dp_rank, dp)
                       : ElementRange{0, plan.buffer_size};
  if (p.sequence_parallel && p.tp_size > 1)
    for (const TensorView& t : layout.tensors())
      if (replicated_over_tp(p, t))
        plan.gradients.push_back(
            {Kind::all_reduce, ParallelAxis::tp, {t.offset, t.offset + t.size}, -1});
  const ElementRange whole{0, plan.buffer_size};
  if (sharded) {
    plan.gradients.push_back({Kind::reduce_scatter, ParallelAxis::dp, whole, -1});
    plan.parameters.push_back({Kind::all_gather, ParallelAxis::dp, whole, -1});
  } else if (dp > 1) {
    plan.gradients.push_back({Kind::all_reduce, ParallelAxis::dp, {0, layout.total()}, -1});
  }
  if (tied) {
    const TensorView& wte = layout.at("wte");
    STRATA_CHECK(wte.offset == 0, "the tied exchange needs wte to lead the layout");
    const int peer = p.has_embedding ? placement.pp_size - 1 : 0;
    // Sharded: the owned part, the same elements on both ends (see the header).
    const ElementRange exchanged = intersect({wte.offset, wte.offset + wte.size}, plan.owned);
    if (!exchanged.empty())
      plan.gradients.push_back({Kind::tied_exchange, ParallelAxis::pp, exchanged, peer});
  }
  for (const TensorView& t : layout.tensors()) {
    if (is_tied_copy(p, t) || (replicated_over_tp(p, t) && p.tp_rank != 0)) continue;
    // One range per tensor, not merged: Σ g² adds per range, and this order is the one the
    // runs so far were made with (their grad_norm, and so their clipping, bit for bit).
    const ElementRange counted = intersect({t.offset, t.offset + t.size}, plan.owned);
    if (!counted.empty()) plan.norm_ranges.push_back(counted);
  }
  plan.norm_axes = {ParallelAxis::tp, ParallelAxis::pp};
  if (sharded) plan.norm_axes.push_back(ParallelAxis::dp);
  return plan;
}

}  // namespace strata
