#include "parallel/reduction_plan.h"

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
  if (placement.zero_stage != 0) fail("parallel.zero.stage > 0 is not implemented yet");
  using Kind = RangeReduction::Kind;
  ReductionPlan plan;
  plan.buffer_size = layout.padded_total(1);
  plan.owned = {0, plan.buffer_size};
  if (p.sequence_parallel && p.tp_size > 1)
    for (const TensorView& t : layout.tensors())
      if (replicated_over_tp(p, t))
        plan.gradients.push_back(
            {Kind::all_reduce, ParallelAxis::tp, {t.offset, t.offset + t.size}, -1});
  if (placement.dp_size > 1)
    plan.gradients.push_back({Kind::all_reduce, ParallelAxis::dp, {0, layout.total()}, -1});
  if (placement.pp_size > 1 && (p.has_embedding || p.has_head)) {
    const TensorView& wte = layout.at("wte");
    const int peer = p.has_embedding ? placement.pp_size - 1 : 0;
    plan.gradients.push_back(
        {Kind::tied_exchange, ParallelAxis::pp, {wte.offset, wte.offset + wte.size}, peer});
  }
  for (const TensorView& t : layout.tensors()) {
    if (is_tied_copy(p, t) || (replicated_over_tp(p, t) && p.tp_rank != 0)) continue;
    // One range per tensor, not merged: Σ g² adds per range, and this order is the one the
    // runs so far were made with (their grad_norm, and so their clipping, bit for bit).
    plan.norm_ranges.push_back({t.offset, t.offset + t.size});
  }
  plan.norm_axes = {ParallelAxis::tp, ParallelAxis::pp};
  return plan;
}

}  // namespace strata
