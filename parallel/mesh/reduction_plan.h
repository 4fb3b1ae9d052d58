// The gradient reductions that close a training step, as data (docs/ARCHITECTURE.md §2: reductions
// are plans of range operations). A plan is built once per layout by a pure function of the layout,
// the model partition and this rank's place in the mesh, unit-tested without MPI, and executed by
// either backend: on host memory (parallel/mesh/host_reduction.h) or on the device (NCCL, or staged
// through the host).
//
// Under ZeRO stage 0 a plan is, in this order:
// 1. Sequence parallelism: tensors replicated over the tensor-parallel group (LayerNorms,
//    row-parallel biases, wpe) saw only this rank's rows: their partial gradients are summed over
//    the group. (Without it every rank computed the full gradient already.)
// 2. Data parallelism: every gradient is summed over the data-parallel group. Under expert
//    parallelism (ep > 1, stage 0 only so far) the dp ranks hold different experts: the dense
//    tensors are summed over dp and the expert tensors over expert_dp (the ranks holding the same
//    experts), run by run of consecutive tensors; the norm counts the dense tensors on ep rank 0
//    and every rank's experts, summed over ep too.
// 3. Pipeline parallelism: the tied wte lives on the first and the last stage; their gradients
//    (embedding and head), already summed over data parallelism, are exchanged and summed.
//    In this order the two stages' copies stay bitwise equal whatever order an all-reduce sums
//    in: the first and the last stage reduce over different groups, with wte at different
//    offsets of different-sized buffers, so a ring all-reduce over 3 or more ranks may round
//    their dp sums differently, but after it each end adds the same two values.
// The gradient norm then sums Σ g² over norm_ranges (each logical element counted once over all
// ranks: replicas over tp and the last stage's wte copy are left out) and over norm_axes.
//
// Under expert parallelism (ep > 1) ZeRO shards over expert_dp, the dp/ep ranks that hold the
// same tensors (the same experts, and the dense tensors every dp rank holds), instead of dp: what
// is said below of dp holds of expert_dp, and the dense tensors' gradients are first summed over
// the ep group (summed_over_ep). The dense optimizer state is then sharded dp/ep ways, not dp
// ways: each ep member keeps the same shard of it and updates it alike, the price of one
// contiguous owned range per rank. It needs dp/ep > 1.
//
// ZeRO stage 1 (dp > 1): the buffers are padded to dp equal shards (ParameterLayout::shard) and
// data-parallel rank r owns shard r: the optimizer state is its shard only. Step 2 becomes a
// reduce-scatter of the whole buffer over the data-parallel group (each owner receives the sum of
// its shard: the same bytes as half the all-reduce). The two pipeline ends pad their buffers to
// the larger of their two totals, so that, wte leading both layouts, data-parallel rank r owns the
// same wte elements on both ends: step 3 exchanges just the owned part, already summed over data
// parallelism, and the argument above holds shard by shard. Each owner counts its shard in the
// norm (summed over dp too), updates it, and `parameters` all-gathers the updated shards (the
// all-reduce's other half).
//
// ZeRO stage 2 shards the gradients too: the same shards, but the data-parallel reduce-scatter is
// not in `gradients`; it runs segment by segment (ParameterSegment: wte, wpe, each block, lnf)
// while the backward passes produce them (parallel/zero/sharded_parameters.h), each owner receiving
// its part of the segment (uneven: shard_counts), so the rank's gradient buffer is its owned
// range only. What is left for `gradients` are the operations on owned ranges: the
// sequence-parallel sum over tp of the replicated tensors (after the dp sum rather than before:
// the sums commute, and the owned part is 1/dp of the work) and the tied exchange. Stage 3 keeps
// the parameters sharded as well: no `parameters` gather; the weights are gathered per segment
// when the model uses them.
#pragma once

#include <vector>

#include "model/core/element_range.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/mesh.h"

namespace strata {

// dp: the replicas of the same weights, the dp × cp ranks of a (tp, pp) position (context
// parallelism's ranks hold the same weights; ProcessGroups::dp_cp). ep and expert_dp: expert
// parallelism's two parts of the dp group (parallel/mesh/mesh.h).
enum class ParallelAxis { tp, dp, pp, ep, expert_dp };
// The size of an axis's groups on a mesh of `mesh`.
int axis_size(const MeshShape& mesh, ParallelAxis axis);

// One operation on a range of the flat fp32 gradient (or parameter) buffer over one group.
struct RangeReduction {
  enum class Kind {
    all_reduce,      // every member gets the sum of the range
    reduce_scatter,  // the range is `group size` equal chunks; member r gets the sum of chunk r
    all_gather,      // the range is `group size` equal chunks; every member gets every chunk
    tied_exchange,   // the range is swapped with pipeline member `peer` and the two are added
  };
  Kind kind = Kind::all_reduce;
  ParallelAxis axis = ParallelAxis::dp;
  ElementRange range;
  int peer = -1;  // tied_exchange only
  bool operator==(const RangeReduction&) const = default;
};

// This rank's place in the mesh, as far as reductions care.
struct ReductionPlacement {
  ModelPartition partition;
  int dp_rank = 0, dp_size = 1;
  int pp_rank = 0, pp_size = 1;
  int zero_stage = 0;
  // The LM head is wte (model.tie_embeddings): with several stages both ends hold it.
  bool tied_embeddings = true;
  // On a pipeline end holding the tied wte: the other end's layout total (tied_peer_total).
  std::size_t tied_peer_total = 0;
};

struct ReductionPlan {
  std::vector<RangeReduction> gradients;       // after the backward passes, before the norm
  std::vector<RangeReduction> parameters;      // after the optimizer (gathers updated shards)
  ElementRange owned;                          // the elements this rank's optimizer updates
  bool sharded = false;                        // owned is this rank's ZeRO shard (dp > 1)
  ParallelAxis shard_axis = ParallelAxis::dp;  // the group of the shards: dp, or expert_dp (ep > 1)
  std::vector<ElementRange> norm_ranges;  // Σ g² over these (sorted, disjoint, by tensor) ...
  std::vector<ParallelAxis> norm_axes;    // ... then summed over these groups
  // The flat buffers' length on this rank: the layout padded for its shards.
  std::size_t buffer_size = 0;
  int zero_stage = 0;                 // as configured (0 or 1 leaves everything replicated at dp 1)
  ElementRange gradient_range;        // what the gradient buffer holds: all, or owned (stage >= 2)
  ElementRange parameter_range;       // what the master weights hold: all, or owned (stage 3)
  bool gradients_by_segment = false;  // stage >= 2: the dp reduce-scatter runs per segment
  bool parameters_by_segment = false;  // stage 3: weights are gathered per segment when used
  // ZeRO under expert parallelism: the dense runs of the layout, whose gradients are summed over
  // ep before the shards' reduce-scatter over expert_dp (stage 1: ops of `gradients`; stages 2 and
  // 3: each segment's bucket, parallel/zero/sharded_parameters.h). Empty otherwise.
  std::vector<ElementRange> summed_over_ep;
};

// How a range of the flat buffer falls on the data-parallel shards of `plan`: counts[r] is the
// size of its intersection with shard r (the chunks of an uneven reduce-scatter or all-gather).
std::vector<std::size_t> shard_counts(const ReductionPlan& plan, const ElementRange& range,
                                      int dp_size);

// This data-parallel rank's share of the replica's elements: its ZeRO shard when the plan is
// sharded, else the same shard arithmetic on the layout (padded, on a pipeline end holding the
// tied wte, to the larger of the two ends' totals, so both ends cut wte alike). The shares of a
// replica's dp ranks tile it: the elements each writes in checkpoints and, under DiLoCo, whose
// outer state it holds and averages across workers.
// Under expert parallelism the replica's ranks holding the same tensors (expert_dp) share them.
ElementRange replica_share(const ParameterLayout& layout, const ReductionPlacement& placement);

// The plan of `placement` for `layout` (= ParameterLayout::for_partition of its partition).
ReductionPlan make_reduction_plan(const ParameterLayout& layout,
                                  const ReductionPlacement& placement);

// Whether tensor `t` of `partition` is replicated over the tensor-parallel group, and whether it
// is the last stage's copy of the tied wte: the two kinds of copy that are not counted twice
// (in norms, in checkpoints).
bool replicated_over_tp(const ModelPartition& partition, const TensorView& t);
bool is_tied_copy(const ModelPartition& partition, const TensorView& t);
// Whether `t` is one expert's (h.<i>.moe.experts.<e>.*): under expert parallelism its gradient is
// summed over expert_dp, not dp, and it is written by the expert_dp ranks.
bool is_expert_tensor(const TensorView& t);

}  // namespace strata
