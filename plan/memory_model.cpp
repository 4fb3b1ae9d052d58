#include "plan/memory_model.h"

#include <algorithm>

#include "model/activation_sizes.h"
#include "model/context_attention.h"
#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "plan/optimizer_state.h"
#include "plan/rank_model.h"
#include "plan/zero3_gathers.h"

namespace strata {
namespace {

// ZeRO 2 and 3's gradient buckets at their peak (parallel/zero/sharded_parameters.h): a segment's
// bucket lives from its first gradient of the step until its reduce-scatter, which runs after
// every backward pass (gradient_reduction: micro_batch, or a step of one micro-batch) or after the
// last one (step). In the first case the tied wte's bucket spans the whole backward pass of a
// stage holding it while the other segments come and go one at a time (Gpt's backward order);
// in the second every bucket lives until the last pass.
std::size_t gradient_bucket_bytes(const ParameterLayout& layout, const ReductionPlan& plan,
                                  const ZeroConfig& zero, int accumulation, bool first, bool last) {
  if (!plan.gradients_by_segment) return 0;
  if (zero.gradient_reduction == GradientReduction::step && accumulation >= 2)
    return layout.total() * sizeof(float);
  const std::vector<ParameterSegment> segments = layout.segments();
  const SegmentIndex index = segment_index(segments);
  const auto size = [&](int i) { return i < 0 ? std::size_t{0} : segments[i].range.size(); };
  std::size_t block = 0;
  for (std::size_t i = static_cast<std::size_t>(index.first_block); i < segments.size(); ++i)
    if (static_cast<int>(i) != index.lnf) block = std::max(block, segments[i].range.size());
  const std::size_t wte = size(index.wte), wpe = size(index.wpe), lnf = size(index.lnf);
  std::size_t peak = block;
  if (first && last)
    peak = wte + std::max({lnf, block, wpe});
  else if (first)
    peak = wte + std::max(block, wpe);
  else if (last)
    peak = std::max(wte + lnf, block);
  return peak * sizeof(float);
}

// ZeRO++ hpZ's secondary weights: after a segment's forward gather, each rank keeps its even
// piece of it for the gathers inside its node, over the data-parallel ranks that share the node
// (rank 0's group: min(dp, ⌈gpus_per_node / tp⌉) of them, tp being the innermost mesh axis).
std::size_t secondary_weight_bytes(const ParameterLayout& layout, const Config& config,
                                   const MeshShape& mesh) {
  if (!config.parallel.zero.hierarchical_partition) return 0;
  const std::size_t group = static_cast<std::size_t>(
      std::min(mesh.dp, (config.parallel.gpus_per_node + mesh.tp - 1) / mesh.tp));
  std::size_t elements = 0;
  for (const ParameterSegment& segment : layout.segments())
    elements += (segment.range.size() + group - 1) / group;
  return elements * sizeof(float);
}

// ZeRO 3's gathered weights at their peak: the model holds one segment's gathered weights at a
// time, and from the second step on the gather of the next segment (the one that followed in the
// previous step) is started while the current one is in use, unless it is the same segment.
std::size_t gathered_weight_bytes(const ParameterLayout& layout, const ReductionPlan& plan,
                                  const ModelPartition& partition,
                                  const std::vector<PipelineOp>& program) {
  if (!plan.parameters_by_segment) return 0;
  const std::vector<ParameterSegment> segments = layout.segments();
  const std::vector<SegmentGatherUse> order =
      zero3_gather_sequence(partition, segment_index(segments), program);
  const auto size = [&](std::size_t i) {
    return segments[static_cast<std::size_t>(order[i].segment)].range.size();
  };
  std::size_t peak = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    peak = std::max(peak, size(i));
    if (i + 1 < order.size() && order[i].segment != order[i + 1].segment)
      peak = std::max(peak, size(i) + size(i + 1));
  }
  return peak * sizeof(float);
}

}  // namespace

MemoryAccount predict_memory(const Config& config, int world_size, int stage, int tp_rank,
                             int dp_rank) {
  const RankModel rank = rank_model(config, world_size, stage, tp_rank, dp_rank);
  const MeshShape& mesh = rank.mesh;
  const ModelPartition& partition = rank.partition;
  const ParameterLayout& layout = rank.layout;
  const ReductionPlan& plan = rank.plan;
  // The ends of the model: with virtual stages zbv's rank 0 holds both, its last rank neither.
  const bool first = partition.has_embedding, last = partition.has_head;

  MemoryAccount account;
  account.master_weights = plan.parameter_range.size() * sizeof(float);
  // The CPU backend emulates bf16/fp16 in fp32 storage.
  if (config.precision.compute != cpu::ComputeDtype::fp32)
    account.compute_weights = account.master_weights;
  account.gradients = plan.gradient_range.size() * sizeof(float);
  account.optimizer_state = optimizer_state_bytes(layout, plan.owned, config.optimizer);
  account.communication = std::max(reduction_scratch_floats(plan.gradients, mesh),
                                   reduction_scratch_floats(plan.parameters, mesh)) *
                          sizeof(float);

  const int accumulation = rank.micro_batches;
  account.secondary_weights = secondary_weight_bytes(layout, config, mesh);
  account.gradient_buckets =
      gradient_bucket_bytes(layout, plan, config.parallel.zero, accumulation, first, last);

  // Activation slots: how many micro-batches each chunk holds at once under the schedule. Each
  // chunk is a model of its own (one without virtual stages) with its slots and its recompute
  // workspace.
  const PipelineSchedule kind = config.parallel.pipeline_schedule;
  const int chunks = config.parallel.virtual_stages;
  const PipelineProgram program = make_pipeline_schedule(kind, mesh.pp, accumulation, chunks);
  const PipelineStats stats =
      simulate_pipeline(program, accumulation, pipeline_schedule_simulation(kind, chunks));
  account.gathered_weights =
      gathered_weight_bytes(layout, plan, partition, program[static_cast<std::size_t>(stage)]);
  const std::vector<int>& held = stats.max_held_by_chunk[static_cast<std::size_t>(stage)];
  std::size_t activations = 0;
  for (int c = 0; c < chunks; ++c) {
    const int slots = std::max(1, held[static_cast<std::size_t>(c)]);
    const ActivationElements a =
        activation_elements(rank.shape, partition.chunk(c), config.train.micro_batch,
                            config.recompute, pipeline_schedule_splits_backward(kind));
    activations += a.workspace + slots * (a.per_slot + a.moe_per_slot);
  }
  account.activations = activations * sizeof(float);
  // Context parallelism: each chunk's model reserves its attention's working memory.
  if (mesh.cp > 1) {
    const GptShape& shape = rank.shape;
    account.activations +=
        static_cast<std::size_t>(chunks) *
        context_attention_memory_bytes(config.parallel.cp_comm, mesh.cp, config.train.micro_batch,
                                       partition.context.local_length(shape.seq_len),
                                       shape.n_head / mesh.tp, shape.kv_head_count() / mesh.tp,
                                       shape.head_size(), sizeof(float), sizeof(float));
  }
  return account;
}

}  // namespace strata
