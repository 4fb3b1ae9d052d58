#include "parallel/mesh/reduction_plan.h"

#include <algorithm>

#include "model/core/error.h"

namespace strata {

bool replicated_over_tp(const ModelPartition& partition, const TensorView& t) {
  return partition.tp_size > 1 && t.slice.is_whole();
}

bool is_tied_copy(const ModelPartition& partition, const TensorView& t) {
  return t.name == "wte" && !partition.has_embedding;
}

bool is_expert_tensor(const TensorView& t) {
  return t.name.find(".moe.experts.") != std::string::npos;
}

int axis_size(const MeshShape& mesh, ParallelAxis axis) {
  switch (axis) {
    case ParallelAxis::tp:
      return mesh.tp;
    case ParallelAxis::dp:  // the replicas of the same weights: dp × cp
      return mesh.dp * mesh.cp;
    case ParallelAxis::pp:
      return mesh.pp;
    case ParallelAxis::ep:
      return mesh.ep;
    case ParallelAxis::expert_dp:
      return mesh.dp / mesh.ep;
  }
  return 1;
}

namespace {
// The layout as runs of consecutive tensors of one kind: (expert, range) in layout order.
std::vector<std::pair<bool, ElementRange>> expert_and_dense_runs(const ParameterLayout& layout) {
  std::vector<std::pair<bool, ElementRange>> runs;
  for (const TensorView& t : layout.tensors()) {
    const bool expert = is_expert_tensor(t);
    if (!runs.empty() && runs.back().first == expert)
      runs.back().second.end = t.offset + t.size;
    else
      runs.push_back({expert, {t.offset, t.offset + t.size}});
  }
  return runs;
}

std::vector<ElementRange> dense_runs(const ParameterLayout& layout) {
  std::vector<ElementRange> dense;
  for (const auto& [expert, range] : expert_and_dense_runs(layout))
    if (!expert) dense.push_back(range);
  return dense;
}

// Expert parallelism, stage 0: each run of consecutive dense tensors summed over dp, each run of
// expert tensors over the ranks holding the same experts (when there are several).
void sum_over_replicas(const ParameterLayout& layout, int expert_replicas,
                       std::vector<RangeReduction>& ops) {
  for (const auto& [expert, range] : expert_and_dense_runs(layout))
    if (!expert || expert_replicas > 1)
      ops.push_back({RangeReduction::Kind::all_reduce,
                     expert ? ParallelAxis::expert_dp : ParallelAxis::dp, range, -1});
}

// One pipeline end of two: the embedding's rank is stage 0 and the head's the last stage (a zbv
// rank 0 holds both, and its one wte serves both).
bool holds_tied_wte(const ReductionPlacement& placement) {
  return placement.tied_embeddings && placement.pp_size > 1 &&
         placement.partition.has_embedding != placement.partition.has_head;
}
}  // namespace

ElementRange replica_share(const ParameterLayout& layout, const ReductionPlacement& placement) {
  const std::size_t total = holds_tied_wte(placement)
                                ? std::max(layout.total(), placement.tied_peer_total)
                                : layout.total();
  const int ep = placement.partition.ep_size;
  return ParameterLayout::shard_of(total, placement.dp_rank / ep, placement.dp_size / ep);
}

ReductionPlan make_reduction_plan(const ParameterLayout& layout,
                                  const ReductionPlacement& placement) {
  const ModelPartition& p = placement.partition;
  STRATA_CHECK(placement.zero_stage >= 0 && placement.zero_stage <= 3, "ZeRO stage ",
               placement.zero_stage, " does not exist");
  using Kind = RangeReduction::Kind;
  const int dp = placement.dp_size, ep = p.ep_size;
  STRATA_CHECK(ep >= 1 && dp % ep == 0, "expert parallelism of ", ep, " in dp ", dp);
  // ZeRO shards over the ranks that hold the same tensors: dp, or its expert_dp part.
  const int shards = dp / ep, shard_rank = placement.dp_rank / ep;
  const ParallelAxis shard_axis = ep > 1 ? ParallelAxis::expert_dp : ParallelAxis::dp;
  const bool sharded = placement.zero_stage >= 1 && shards > 1;
  const bool tied = holds_tied_wte(placement);
  ReductionPlan plan;
  const std::size_t total =
      sharded && tied ? std::max(layout.total(), placement.tied_peer_total) : layout.total();
  plan.sharded = sharded;
  plan.shard_axis = shard_axis;
  plan.buffer_size = ParameterLayout::padded_size(total, sharded ? shards : 1);
  plan.owned = sharded ? ParameterLayout::shard_of(total, shard_rank, shards)
                       : ElementRange{0, plan.buffer_size};
  if (sharded && ep > 1) plan.summed_over_ep = dense_runs(layout);
  const ElementRange whole{0, plan.buffer_size};
  plan.zero_stage = placement.zero_stage;
  plan.gradients_by_segment = sharded && placement.zero_stage >= 2;
  plan.parameters_by_segment = sharded && placement.zero_stage >= 3;
  plan.gradient_range = plan.gradients_by_segment ? plan.owned : whole;
  plan.parameter_range = plan.parameters_by_segment ? plan.owned : whole;
  // Sequence parallelism: the replicated tensors' partial sums over tp (see the header for where).
  auto sum_replicated_over_tp = [&](const ElementRange& within) {
    if (!p.sequence_parallel || p.tp_size == 1) return;
    for (const TensorView& t : layout.tensors()) {
      const ElementRange part = intersect({t.offset, t.offset + t.size}, within);
      if (replicated_over_tp(p, t) && !part.empty())
        plan.gradients.push_back({Kind::all_reduce, ParallelAxis::tp, part, -1});
    }
  };
  if (plan.gradients_by_segment) {
    sum_replicated_over_tp(plan.owned);
  } else {
    sum_replicated_over_tp(whole);
    for (const ElementRange& dense : plan.summed_over_ep)
      plan.gradients.push_back({Kind::all_reduce, ParallelAxis::ep, dense, -1});
    if (sharded)
      plan.gradients.push_back({Kind::reduce_scatter, shard_axis, whole, -1});
    else if (dp > 1 && ep == 1)
      plan.gradients.push_back({Kind::all_reduce, ParallelAxis::dp, {0, layout.total()}, -1});
    else if (dp > 1)
      sum_over_replicas(layout, dp / ep, plan.gradients);
  }
  if (sharded && !plan.parameters_by_segment)
    plan.parameters.push_back({Kind::all_gather, shard_axis, whole, -1});
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
    // Expert parallelism: the ep ranks hold the same dense tensors, and different experts.
    if (p.ep_rank != 0 && !is_expert_tensor(t)) continue;
    // One range per tensor, not merged: Σ g² adds per range, and this order is the one the
    // runs so far were made with (their grad_norm, and so their clipping, bit for bit).
    const ElementRange counted = intersect({t.offset, t.offset + t.size}, plan.owned);
    if (!counted.empty()) plan.norm_ranges.push_back(counted);
  }
  plan.norm_axes = {ParallelAxis::tp, ParallelAxis::pp};
  if (ep > 1) plan.norm_axes.push_back(ParallelAxis::ep);
  if (sharded) plan.norm_axes.push_back(shard_axis);
  return plan;
}

std::vector<std::size_t> shard_counts(const ReductionPlan& plan, const ElementRange& range,
                                      int dp_size) {
  std::vector<std::size_t> counts;
  const std::size_t shard = plan.buffer_size / static_cast<std::size_t>(dp_size);
  for (int r = 0; r < dp_size; ++r) {
    const std::size_t begin = static_cast<std::size_t>(r) * shard;
    counts.push_back(intersect(range, {begin, begin + shard}).size());
  }
  return counts;
}

}  // namespace strata
