#include "plan/comm_model.h"

#include <algorithm>
#include <array>

#include "model/activation_sizes.h"
#include "model/context_attention.h"
#include "model/core/error.h"
#include "model/fp8/fp8_state.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/zero/segment_collectives.h"
#include "parallel/zero/sharded_parameters.h"
#include "plan/memory_account.h"
#include "plan/optimizer_state.h"
#include "plan/placement.h"
#include "plan/rank_model.h"
#include "plan/zero3_gathers.h"

namespace strata {

std::uint64_t CommEvent::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [link, sent] : bytes) total += sent;
  return total;
}

std::map<std::string, std::map<LinkClass, std::uint64_t>> CommPrediction::bytes_by_kind() const {
  std::map<std::string, std::map<LinkClass, std::uint64_t>> by_kind;
  for (const CommEvent& e : events)
    for (const auto& [link, sent] : e.bytes)
      if (sent > 0) by_kind[e.kind][link] += sent * static_cast<std::uint64_t>(e.repeats);
  return by_kind;
}

std::uint64_t CommPrediction::group_bytes(CommGroup group) const {
  std::uint64_t total = 0;
  for (const CommEvent& e : events)
    if (e.group == group) total += e.total_bytes() * static_cast<std::uint64_t>(e.repeats);
  return total;
}

std::uint64_t CommPrediction::link_bytes(LinkClass link) const {
  std::uint64_t total = 0;
  for (const CommEvent& e : events) {
    const auto at = e.bytes.find(link);
    if (at != e.bytes.end()) total += at->second * static_cast<std::uint64_t>(e.repeats);
  }
  return total;
}

const char* comm_group_name(CommGroup group) {
  switch (group) {
    case CommGroup::tp:
      return "tp";
    case CommGroup::pp:
      return "pp";
    case CommGroup::dp:
      return "dp";
    case CommGroup::dp_intra_node:
      return "dp_intra_node";
    case CommGroup::dp_inter_node:
      return "dp_inter_node";
    case CommGroup::ep:
      return "ep";
    case CommGroup::expert_dp:
      return "expert_dp";
    case CommGroup::cp:
      return "cp";
    case CommGroup::dp_cp:
      return "dp_cp";
  }
  return "?";
}

namespace {

// One communicator as the predicted rank sees it: its members' world ranks and its own place.
struct GroupView {
  CommGroup group;
  std::vector<int> members;  // world ranks, by group rank
  int rank = 0;              // the predicted rank's group rank
  int gpus_per_node = 1;

  int size() const { return static_cast<int>(members.size()); }
  LinkClass link(int a, int b) const {
    return members[static_cast<std::size_t>(a)] / gpus_per_node ==
                   members[static_cast<std::size_t>(b)] / gpus_per_node
               ? LinkClass::intra_node
               : LinkClass::inter_node;
  }
  LinkClass successor_link() const { return link(rank, (rank + 1) % size()); }
  int node_members() const {
    int count = 0;
    for (int r = 0; r < size(); ++r) count += link(rank, r) == LinkClass::intra_node;
    return count;
  }
  // The slowest hop of the ring (what paces every member of a ring collective).
  LinkClass ring_slowest() const {
    for (int r = 0; r < size(); ++r)
      if (link(r, (r + 1) % size()) == LinkClass::inter_node) return LinkClass::inter_node;
    return LinkClass::intra_node;
  }
};

GroupView view_of(CommGroup group, const std::vector<int>& members, int world_rank,
                  int gpus_per_node) {
  const auto at = std::find(members.begin(), members.end(), world_rank);
  STRATA_CHECK(at != members.end());
  return GroupView{group, members, static_cast<int>(at - members.begin()), gpus_per_node};
}

// Collects the events of one rank's step.
class StepEvents {
 public:
  explicit StepEvents(CommPrediction& out) : out_(out) {}

  // A ring collective sending `sent` bytes per call, in `hops` sequential messages.
  void ring(const GroupView& g, const char* kind, std::uint64_t sent, int hops, CommPhase phase,
            int repeats, const char* what) {
    if (g.size() <= 1 || repeats == 0) return;
    CommEvent e{
        kind,    g.group, phase,           {{g.successor_link(), sent}}, hops, g.ring_slowest(),
        repeats, what,    g.node_members()};
    out_.events.push_back(std::move(e));
  }
  void all_reduce(const GroupView& g, std::uint64_t bytes, CommPhase phase, int repeats,
                  const char* what) {
    ring(g, "all_reduce", ring_all_reduce_bytes(bytes, g.size()), 2 * (g.size() - 1), phase,
         repeats, what);
  }
  // Even chunks: `whole` is the whole buffer (reduce-scatter input, all-gather output).
  void chunked(const GroupView& g, const char* kind, std::uint64_t whole, CommPhase phase,
               int repeats, const char* what) {
    ring(g, kind, ring_chunk_bytes(whole, g.size()), g.size() - 1, phase, repeats, what);
  }
  void send(const GroupView& g, int peer, std::uint64_t bytes, CommPhase phase, int repeats,
            const char* what, int chunk = 0) {
    if (repeats == 0) return;
    const LinkClass link = g.link(g.rank, peer);
    out_.events.push_back(
        CommEvent{"send", g.group, phase, {{link, bytes}}, 1, link, repeats, what, 1, chunk});
  }
  // An uneven all-to-all: bytes_to[p] to each other member p.
  void all_to_all(const GroupView& g, const std::vector<std::uint64_t>& bytes_to, CommPhase phase,
                  int repeats, const char* what) {
    if (g.size() <= 1 || repeats == 0) return;
    CommEvent e{"all_to_all",          g.group, phase, {}, g.size() - 1,
                LinkClass::intra_node, repeats, what};
    for (int p = 0; p < g.size(); ++p) {
      if (p == g.rank) continue;
      e.bytes[g.link(g.rank, p)] += bytes_to[static_cast<std::size_t>(p)];
      if (g.link(g.rank, p) == LinkClass::inter_node) e.slowest = LinkClass::inter_node;
    }
    out_.events.push_back(std::move(e));
  }

 private:
  CommPrediction& out_;
};

constexpr std::uint64_t kScalar = sizeof(double);  // the loss and the norm are summed in double

// FP8's amax reductions (docs/ARCHITECTURE.md §6 "FP8"; model/ops/cpu_ops_fp8.cpp): each cast of
// a GEMM's operand reduces its amaxes, a float's bits as one int64 each, over tp where the layer
// splits the dimension the scale spans and over cp for a micro-batch's rows. tensorwise and the
// delayed recipe's first step: one value per cast. rowwise: one per row of the sum. The delayed
// recipe's later steps: none per cast, then every local block's 4 × 3 step amaxes over tp and the
// replicas once per step (counted here: a step after the first, the steady state).
void fp8_amax_events(const Config& config, const RankModel& rank, const GroupView& tp,
                     const GroupView& cp, const GroupView& replicas, StepEvents& events) {
  const Fp8Settings& fp8 = config.precision.fp8;
  if (!fp8.enabled()) return;
  const ModelPartition& partition = rank.partition;
  constexpr std::uint64_t kAmax = sizeof(std::int64_t);
  if (fp8.scaling == Fp8Scaling::delayed) {
    const std::uint64_t sites =
        static_cast<std::uint64_t>(partition.layers()) * kFp8Layers * kFp8Operands;
    if (tp.size() > 1) events.all_reduce(tp, sites * kAmax, CommPhase::step, 1, "FP8 step amaxes");
    if (replicas.size() > 1)
      events.all_reduce(replicas, sites * kAmax, CommPhase::step, 1, "FP8 step amaxes");
    return;
  }
  const GptShape& shape = rank.shape;
  const int tp_size = tp.size(), micro_batches = rank.micro_batches;
  const std::uint64_t N = static_cast<std::uint64_t>(config.train.micro_batch) *
                          partition.context.local_length(shape.seq_len);
  const bool rowwise = fp8.scaling == Fp8Scaling::rowwise;
  const Recompute recompute = config.recompute;
  // `casts` per micro-batch, each reducing `values` amaxes over `g` when `split`.
  const auto reduce = [&](const GroupView& g, bool split, std::uint64_t values, int casts,
                          CommPhase phase) {
    if (split && g.size() > 1 && casts > 0)
      events.all_reduce(g, values * kAmax, phase, casts * micro_batches,
                        rowwise ? "FP8 row amaxes" : "FP8 amaxes");
  };
  for (int c = 0; c < partition.chunks(); ++c) {
    const LayerRange chunk = partition.chunk_layers(c);
    for (int layer = chunk.begin; layer < chunk.end; ++layer) {
      const std::array<bool, kFp8Layers> runs = fp8_gemms_of_block(fp8, shape, layer);
      for (int g = 0; g < kFp8Layers; ++g) {
        if (!runs[static_cast<std::size_t>(g)]) continue;
        const auto gemm = static_cast<Fp8Layer>(g);
        const bool row_parallel = gemm == Fp8Layer::attn_proj || gemm == Fp8Layer::mlp_proj;
        const int forwards = 1 + (recompute == Recompute::full ||
                                  (recompute == Recompute::selective && gemm == Fp8Layer::qkv));
        if (!rowwise) {
          // One value per cast. Forward: the input (tp where its channels are split), the weight
          // (tp). d input: grad_output (tp where its channels are), the weight. d weight:
          // grad_output, the input. Every activation's over cp.
          reduce(tp, row_parallel, 1, forwards, CommPhase::forward);
          reduce(tp, true, 1, forwards, CommPhase::forward);
          reduce(tp, !row_parallel, 1, 2, CommPhase::backward);
          reduce(tp, true, 1, 1, CommPhase::backward);
          reduce(tp, row_parallel, 1, 1, CommPhase::backward);
          reduce(cp, true, 1, forwards, CommPhase::forward);
          reduce(cp, true, 1, 3, CommPhase::backward);
          continue;
        }
        // Rowwise, one value per row of each sum: forward, per row of the input and of the
        // weight over the input channels (tp where split); d input, per row of grad_output and
        // per column of the weight over the output channels (tp where split); d weight, per
        // column of grad_output and of the input over the rows (cp).
        const long in = gemm == Fp8Layer::mlp_proj ? shape.ffn_width() : shape.d_model;
        const long out = gemm == Fp8Layer::qkv      ? shape.qkv_width()
                         : gemm == Fp8Layer::mlp_fc ? shape.fc_width()
                                                    : shape.d_model;
        const auto IC = static_cast<std::uint64_t>(row_parallel ? in / tp_size : in);
        const auto OC = static_cast<std::uint64_t>(row_parallel ? out : out / tp_size);
        reduce(tp, row_parallel, N, forwards, CommPhase::forward);
        reduce(tp, row_parallel, OC, forwards, CommPhase::forward);
        reduce(tp, !row_parallel, N, 1, CommPhase::backward);
        reduce(tp, !row_parallel, IC, 1, CommPhase::backward);
        reduce(cp, true, OC, 1, CommPhase::backward);
        reduce(cp, true, IC, 1, CommPhase::backward);
      }
    }
  }
}

}  // namespace

CommPrediction predict_communication(const Config& config, int world_size, int stage, int tp_rank,
                                     int dp_rank, std::size_t row_element_bytes) {
  const RankModel rank = rank_model(config, world_size, stage, tp_rank, dp_rank);
  const MeshShape& mesh = rank.mesh;
  const int gpn = config.parallel.gpus_per_node;
  const Mesh place(mesh, Mesh::world_rank_of(mesh, tp_rank, dp_rank, stage), gpn);
  const int me = place.world_rank();
  const GroupView tp = view_of(CommGroup::tp, place.tp_group(), me, gpn);
  const GroupView pp = view_of(CommGroup::pp, place.pp_group(), me, gpn);
  const GroupView dp = view_of(CommGroup::dp, place.dp_group(), me, gpn);
  const GroupView intra = view_of(CommGroup::dp_intra_node, place.dp_intra_node_group(), me, gpn);
  const GroupView inter = view_of(CommGroup::dp_inter_node, place.dp_inter_node_group(), me, gpn);
  const GroupView ep = view_of(CommGroup::ep, place.ep_group(), me, gpn);
  const GroupView expert_dp = view_of(CommGroup::expert_dp, place.expert_dp_group(), me, gpn);
  const GroupView cp = view_of(CommGroup::cp, place.cp_group(), me, gpn);
  const GroupView dp_cp = view_of(CommGroup::dp_cp, place.dp_cp_group(), me, gpn);
  // The replicas of the same weights (the plan's dp axis): dp, or under context parallelism dp_cp.
  const GroupView& replicas = mesh.cp > 1 ? dp_cp : dp;
  // ZeRO's shards: the ranks holding the same tensors (the replicas, or under expert parallelism
  // expert_dp).
  const GroupView& shards = mesh.ep > 1 ? expert_dp : replicas;

  const ModelConfig& m = config.model;
  const ModelPartition& partition = rank.partition;
  const ReductionPlan& plan = rank.plan;
  const int micro_batches = rank.micro_batches;
  const bool sp = config.parallel.sequence_parallel && mesh.tp > 1;
  const std::uint64_t rows = static_cast<std::uint64_t>(config.train.micro_batch) *
                             partition.context.local_length(m.seq_len);
  const std::uint64_t full = rows * m.d_model * row_element_bytes;  // (N, C), summed over tp
  // The residual stream's rows crossing a stage boundary: host fp32 on both backends.
  const std::uint64_t boundary = rows * m.d_model * sizeof(float) / (sp ? mesh.tp : 1);
  const int layers = partition.layers();
  const Recompute recompute = config.recompute;

  CommPrediction out;
  StepEvents events(out);
  // Tensor parallelism, per micro-batch (model/gpt.cpp): a sum of partial rows is an all-reduce,
  // or under sequence parallelism a reduce-scatter to this rank's rows; a gather of rows is an
  // all-gather under sequence parallelism and nothing otherwise.
  const auto sums = [&](CommPhase phase, int per_pass, const char* what) {
    if (sp)
      events.chunked(tp, "reduce_scatter", full, phase, per_pass * micro_batches, what);
    else
      events.all_reduce(tp, full, phase, per_pass * micro_batches, what);
  };
  const auto gathers = [&](CommPhase phase, int per_pass, const char* what) {
    if (sp) events.chunked(tp, "all_gather", full, phase, per_pass * micro_batches, what);
  };
  if (partition.has_embedding) sums(CommPhase::forward, 1, "embedding sum");
  sums(CommPhase::forward, 2 * layers, "layer sums");
  gathers(CommPhase::forward, 2 * layers, "layer row gathers");
  if (partition.has_head) {
    gathers(CommPhase::forward, 1, "head row gather");
    events.chunked(tp, "all_gather", rows * mesh.tp * sizeof(float), CommPhase::forward,
                   micro_batches, "loss row maxima");
    events.all_reduce(tp, 2 * rows * sizeof(float), CommPhase::forward, micro_batches,
                      "loss row sums");
    sums(CommPhase::backward, 1, "head gradient sum");
  }
  const int recomputed = recompute == Recompute::full ? 2 * layers : 0;
  sums(CommPhase::backward, 2 * layers + recomputed, "layer gradient sums");
  gathers(CommPhase::backward, 2 * layers + recomputed, "layer gradient row gathers");
  if (partition.has_embedding) gathers(CommPhase::backward, 1, "embedding gradient gather");

  // Context parallelism (see the header): ring, the cp − 1 blocks forward, and backward the blocks
  // again with their gradients' cp hops, each to the ring successor; all_gather, the blocks
  // gathered in both passes and their gradients reduce-scattered.
  if (mesh.cp > 1) {
    const GptShape& shape = rank.shape;
    const int kv = shape.kv_head_count() / mesh.tp, hs = shape.head_size();
    const auto bytes = [&](bool backward) {
      return context_attention_bytes(
          config.parallel.cp_comm, backward, mesh.cp, config.train.micro_batch,
          static_cast<int>(rows) / config.train.micro_batch, kv, hs, row_element_bytes);
    };
    const int forwards = layers * micro_batches * (recompute == Recompute::none ? 1 : 2);
    const int backwards = layers * micro_batches;
    if (config.parallel.cp_comm == ContextComm::ring) {
      const int next = (cp.rank + 1) % cp.size();
      events.send(cp, next, bytes(false), CommPhase::forward, forwards, "attention K/V ring");
      events.send(cp, next, bytes(true), CommPhase::backward, backwards,
                  "attention K/V and dK/dV ring");
    } else {
      const std::uint64_t blocks = bytes(false) / static_cast<std::uint64_t>(mesh.cp - 1) * mesh.cp;
      events.chunked(cp, "all_gather", blocks, CommPhase::forward, forwards,
                     "attention K/V gather");
      events.chunked(cp, "all_gather", blocks, CommPhase::backward, backwards,
                     "attention K/V gather");
      events.chunked(cp, "reduce_scatter", blocks, CommPhase::backward, backwards,
                     "attention dK/dV reduce-scatter");
    }
  }

  fp8_amax_events(config, rank, tp, cp, replicas, events);

  // Mixture of experts, per MoE block and micro-batch (see the header): the gates' gradient sum
  // over tp, and under expert parallelism the token exchange over ep, its rows under balanced
  // routing.
  const MoeConfig& moe = m.moe;
  const int moe_blocks = moe_block_count(rank.shape, partition);
  if (moe_blocks > 0) {
    const int passes = moe_blocks * micro_batches;
    events.all_reduce(tp, rows * moe.top_k * sizeof(float), CommPhase::backward, passes,
                      "MoE gate gradient sums");
    const std::uint64_t assignments =
        moe_balanced_assignments(moe, static_cast<int>(rows), m.seq_len);
    const std::vector<std::uint64_t> counts(
        static_cast<std::size_t>(ep.size()),
        static_cast<std::uint64_t>(moe.experts / mesh.ep) * sizeof(std::int32_t));
    const std::vector<std::uint64_t> rows_out(
        static_cast<std::size_t>(ep.size()),
        assignments / static_cast<std::uint64_t>(mesh.ep) * m.d_model * row_element_bytes);
    const auto exchange = [&](CommPhase phase, const char* counted, const char* out,
                              const char* back) {
      if (counted != nullptr) events.all_to_all(ep, counts, phase, passes, counted);
      events.all_to_all(ep, rows_out, phase, passes, out);
      events.all_to_all(ep, rows_out, phase, passes, back);
    };
    exchange(CommPhase::forward, "MoE token counts", "MoE token dispatch", "MoE token combine");
    if (recompute == Recompute::full)
      exchange(CommPhase::backward, "MoE recomputed token counts", "MoE recomputed dispatch",
               "MoE recomputed combine");
    exchange(CommPhase::backward, nullptr, "MoE gradient dispatch", "MoE gradient combine");
  }

  // Pipeline messages, per micro-batch and chunk (parallel/pipeline/pipeline_executor.h): every
  // virtual stage sends its activations to the next and its input gradients to the previous,
  // unless that one is on this rank too (the V's turn: handed over in place).
  const PipelineLayout chunks =
      pipeline_schedule_layout(config.parallel.pipeline_schedule, config.parallel.virtual_stages);
  const int virtual_stages = mesh.pp * chunks.chunks;
  for (int c = 0; c < chunks.chunks; ++c) {
    const int here = pipeline_virtual_stage(chunks, mesh.pp, stage, c);
    const auto stage_of = [&](int virtual_stage) {
      return pipeline_stage_chunk(chunks, mesh.pp, virtual_stage).stage;
    };
    if (here + 1 < virtual_stages && stage_of(here + 1) != stage)
      events.send(pp, stage_of(here + 1), boundary, CommPhase::pipeline, micro_batches,
                  "activations", c);
    if (here > 0 && stage_of(here - 1) != stage)
      events.send(pp, stage_of(here - 1), boundary, CommPhase::pipeline, micro_batches, "gradients",
                  c);
  }

  // ZeRO 2 and 3: each segment's gradients reduce-scattered over the shards (dp, or expert_dp)
  // after every backward pass (micro_batch, or a step of one micro-batch) or once after the last
  // (step); under expert parallelism the segment's dense part is summed over ep first.
  const std::vector<ParameterSegment> segments = rank.layout.segments();
  if (plan.gradients_by_segment && shards.size() > 1) {
    const bool every_pass =
        config.parallel.zero.gradient_reduction == GradientReduction::micro_batch ||
        micro_batches == 1;
    const int repeats = every_pass ? micro_batches : 1;
    const CommPhase phase = every_pass ? CommPhase::backward : CommPhase::step;
    for (const ParameterSegment& segment : segments) {
      for (const ElementRange& dense : plan.summed_over_ep) {
        const ElementRange part = intersect(dense, segment.range);
        if (!part.empty())
          events.all_reduce(ep, part.size() * sizeof(float), phase, repeats,
                            "segment dense gradient sum over ep");
      }
      const std::vector<std::size_t> counts = shard_counts(plan, segment.range, shards.size());
      std::size_t total = 0;
      for (std::size_t c : counts) total += c;
      const std::size_t n = static_cast<std::size_t>(shards.size());
      if (!config.parallel.zero.quantized_gradients || total < kGradientQuantBlock * n) {
        events.ring(shards, "reduce_scatter", ring_reduce_scatter_v_bytes(counts, shards.rank, 4),
                    shards.size() - 1, phase, repeats, "segment gradient reduce-scatter");
        continue;
      }
      // qgZ (parallel/zero/segment_collectives.h): owner (node j, local l) = j·intra + l.
      const std::size_t k = static_cast<std::size_t>(intra.size());
      std::vector<std::uint64_t> hop1(k, 0), hop2(static_cast<std::size_t>(inter.size()), 0);
      for (std::size_t l = 0; l < k; ++l)
        for (std::size_t j = 0; j < hop2.size(); ++j)
          hop1[l] += gradient_layout(counts[j * k + l]).bytes;
      for (std::size_t j = 0; j < hop2.size(); ++j)
        hop2[j] = gradient_layout(counts[j * k + static_cast<std::size_t>(intra.rank)]).bytes;
      events.all_to_all(intra, hop1, phase, repeats, "qgZ hop inside the node");
      events.all_to_all(inter, hop2, phase, repeats, "qgZ hop across nodes");
    }
  }

  // ZeRO 3: every use of a segment's weights is one gather over the shards, in the model's order.
  if (plan.parameters_by_segment && shards.size() > 1) {
    const PipelineProgram program = make_pipeline_schedule(
        config.parallel.pipeline_schedule, mesh.pp, micro_batches, config.parallel.virtual_stages);
    const ZeroConfig& zero = config.parallel.zero;
    for (const SegmentGatherUse& g : zero3_gather_sequence(
             partition, segment_index(segments), program[static_cast<std::size_t>(stage)])) {
      const std::size_t size = segments[static_cast<std::size_t>(g.segment)].range.size();
      if (g.use == WeightUse::backward && zero.hierarchical_partition) {
        const std::vector<std::size_t> counts = secondary_piece_counts(size, intra.size());
        events.ring(intra, "all_gather", ring_all_gather_v_bytes(counts, intra.rank, 4),
                    intra.size() - 1, CommPhase::gather, 1, "hpZ weight gather inside the node");
        continue;
      }
      std::vector<std::size_t> counts =
          shard_counts(plan, segments[static_cast<std::size_t>(g.segment)].range, shards.size());
      std::size_t element = sizeof(float);
      if (g.use == WeightUse::forward && zero.quantized_weights) {
        for (std::size_t& c : counts) c = weight_layout(c).bytes;
        element = 1;
      }
      events.ring(shards, "all_gather", ring_all_gather_v_bytes(counts, shards.rank, element),
                  shards.size() - 1, CommPhase::gather, 1,
                  element == 1 ? "qwZ weight gather" : "weight gather");
    }
  }

  // After the passes: the plan's gradient reductions, the norm, the loss, the parameter gathers.
  const auto group_of = [&](ParallelAxis axis) -> const GroupView& {
    switch (axis) {
      case ParallelAxis::tp:
        return tp;
      case ParallelAxis::pp:
        return pp;
      case ParallelAxis::ep:
        return ep;
      case ParallelAxis::expert_dp:
        return expert_dp;
      case ParallelAxis::dp:
        break;
    }
    return replicas;
  };
  using Kind = RangeReduction::Kind;
  const auto reductions = [&](const std::vector<RangeReduction>& ops, CommPhase phase,
                              const char* what) {
    for (const RangeReduction& op : ops) {
      const GroupView& g = group_of(op.axis);
      const std::uint64_t bytes = op.range.size() * sizeof(float);
      if (op.kind == Kind::all_reduce) events.all_reduce(g, bytes, phase, 1, what);
      if (op.kind == Kind::reduce_scatter)
        events.chunked(g, "reduce_scatter", bytes, phase, 1, what);
      if (op.kind == Kind::all_gather) events.chunked(g, "all_gather", bytes, phase, 1, what);
      if (op.kind == Kind::tied_exchange)
        events.send(g, op.peer, bytes, phase, 1, "tied wte exchange");
    }
  };
  reductions(plan.gradients, CommPhase::step, "gradient reduction");
  for (ParallelAxis axis : plan.norm_axes)
    events.all_reduce(group_of(axis), kScalar, CommPhase::step, 1, "gradient norm");
  events.all_reduce(pp, kScalar, CommPhase::step, 1, "loss");
  events.all_reduce(replicas, kScalar, CommPhase::step, 1, "loss");
  reductions(plan.parameters, CommPhase::update, "updated shard gather");

  // The optimizer's own collectives (plan/optimizer_state.h), before its update.
  const ParameterLayout& layout = rank.layout;
  const OptimizerConfig& o = config.optimizer;
  if (o.name == OptimizerName::adafactor) {
    // Its sums of statistics and of the update's and the weights' squares, in double: the tied
    // wte's all-reduce and the other tensors' over the shards; the split tensors' over tp.
    const AdafactorSums s = adafactor_sums(layout);
    for (const std::size_t wte : {s.wte_statistics, s.wte_norms}) {
      if (plan.sharded && wte > 0)
        events.all_reduce(shards, wte * sizeof(double), CommPhase::step, 1, "Adafactor sums");
      if (mesh.tp > 1 && s.wte_split && wte > 0)
        events.all_reduce(tp, wte * sizeof(double), CommPhase::step, 1, "Adafactor sums");
    }
    for (const auto& [rest, split] : {std::pair{s.other_statistics, s.split_statistics},
                                      std::pair{s.other_norms, s.split_norms}}) {
      if (plan.sharded && rest > 0)
        events.all_reduce(shards, rest * sizeof(double), CommPhase::step, 1, "Adafactor sums");
      if (mesh.tp > 1 && split > 0)
        events.all_reduce(tp, split * sizeof(double), CommPhase::step, 1, "Adafactor sums");
    }
  }
  if (o.name == OptimizerName::adamw8bit) {
    // The blocks' maxima (two int64 per block): all of them over the shards, the split tensors'
    // over tp.
    const AdamW8bitBlocks b = adamw8bit_blocks(layout, o.adamw8bit.block_size);
    if (plan.sharded && b.all > 0)
      events.all_reduce(shards, 16 * b.all, CommPhase::step, 1, "AdamW8bit block maxima");
    if (mesh.tp > 1 && b.split > 0)
      events.all_reduce(tp, 16 * b.split, CommPhase::step, 1, "AdamW8bit block maxima");
  }
  if (o.name == OptimizerName::muon) {
    // Each matrix gathered whole: its owned part to every other shard, then the tp slices.
    for (const TensorView& t : layout.tensors()) {
      if (!muon_updates(t)) continue;
      const std::uint64_t held =
          intersect({t.offset, t.offset + t.size}, plan.owned).size() * sizeof(float);
      if (plan.sharded)
        events.all_to_all(shards, std::vector<std::uint64_t>(shards.size(), held), CommPhase::step,
                          1, "Muon matrix gather");
      if (mesh.tp > 1 && held > 0 && !t.slice.is_whole())
        events.chunked(tp, "all_gather", t.size * mesh.tp * sizeof(float), CommPhase::step, 1,
                       "Muon matrix gather");
    }
  }
  return out;
}

}  // namespace strata
