#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>

#include "model/core/error.h"
#include "model/gpt.h"
#include "plan/compute_model.h"
#include "plan/config_fields.h"
#include "plan/memory_model.h"
#include "plan/stage_split.h"

namespace strata {

std::size_t total_bytes(const MemoryAccount& m) {
  return m.master_weights + m.compute_weights + m.gradients + m.optimizer_state +
         m.secondary_weights + m.gathered_weights + m.gradient_buckets + m.activations +
         m.communication;
}

std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes / (1024.0 * 1048576.0));
  return text;
}

std::vector<std::string> PlanLayout::overrides() const {
  std::ostringstream layers;
  layers << "[";
  for (std::size_t i = 0; i < pp_layers.size(); ++i) layers << (i ? "," : "") << pp_layers[i];
  layers << "]";
  const auto flag = [](bool on) { return on ? "true" : "false"; };
  return {"parallel.tp=" + std::to_string(tp),
          "parallel.pp=" + std::to_string(pp),
          "parallel.dp=" + std::to_string(dp),
          "train.micro_batch=" + std::to_string(micro_batch),
          "parallel.pipeline_schedule=" + std::string(kPipelineScheduleChoices.word(schedule)),
          std::string("parallel.sequence_parallel=") + flag(sequence_parallel),
          "recompute=" + std::string(kRecomputeChoices.word(recompute)),
          "parallel.zero.stage=" + std::to_string(zero_stage),
          "parallel.zero.gradient_reduction=" +
              std::string(kGradientReductionChoices.word(gradient_reduction)),
          std::string("parallel.zero.hierarchical_partition=") + flag(hpz),
          std::string("parallel.zero.quantized_weights=") + flag(qwz),
          std::string("parallel.zero.quantized_gradients=") + flag(qgz),
          "parallel.pp_layers=" + layers.str(),
          "parallel.gpus_per_node=" + std::to_string(gpus_per_node),
          "parallel.virtual_stages=" + std::to_string(virtual_stages),
          "parallel.ep=" + std::to_string(ep),
          "parallel.cp=" + std::to_string(cp),
          "parallel.cp_comm=" + std::string(kContextCommChoices.word(cp_comm))};
}

std::string PlanLayout::name() const {
  std::ostringstream out;
  out << "tp" << tp << " pp" << pp;
  if (cp > 1)
    out << " cp" << cp << (cp_comm == ContextComm::ring ? "" : " ")
        << (cp_comm == ContextComm::ring ? "" : kContextCommChoices.word(cp_comm));
  out << " dp" << dp;
  if (ep > 1) out << " ep" << ep;
  out << " mb" << micro_batch;
  if (pp > 1) out << " " << kPipelineScheduleChoices.word(schedule);
  if (virtual_stages != 1) out << " v" << virtual_stages;
  if (sequence_parallel) out << " sp";
  if (zero_stage > 0) out << " zero" << zero_stage;
  if (zero_stage >= 2 && gradient_reduction != GradientReduction::step)
    out << "/" << kGradientReductionChoices.word(gradient_reduction);
  if (hpz) out << " hpZ";
  if (qwz) out << " qwZ";
  if (qgz) out << " qgZ";
  if (recompute != Recompute::none) out << " recompute=" << kRecomputeChoices.word(recompute);
  if (!pp_layers.empty()) {
    out << " layers=";
    for (std::size_t i = 0; i < pp_layers.size(); ++i) out << (i ? "," : "") << pp_layers[i];
  }
  return out.str();
}

namespace {

// The account as the cluster's backend holds it: the CPU backend keeps reduced-precision compute
// weights and activations in fp32; CUDA in 2 bytes, and an offloaded optimizer's state in host
// memory (train/backend/cuda_training.cpp update_on_host), not on the device.
MemoryAccount on_device(MemoryAccount m, const ClusterSpec& cluster, const Config& config) {
  if (activation_element_bytes(cluster, config.precision.compute) == 2) {
    m.compute_weights /= 2;
    m.activations /= 2;
  }
  if (cluster.backend == ClusterBackend::cuda && config.optimizer.offload != OptimizerOffload::none)
    m.optimizer_state = 0;
  return m;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// The base config with `layout`'s keys set, checked by the trainer's own validation (the same
// rules as a file with those --set overrides; set directly, as parsing YAML for each of thousands
// of candidates would dominate the search).
Config with_layout(const Config& base, const PlanLayout& layout) {
  Config config = base;
  ParallelConfig& p = config.parallel;
  p.tp = layout.tp;
  p.pp = layout.pp;
  p.dp = layout.dp;
  config.train.micro_batch = layout.micro_batch;
  p.pipeline_schedule = layout.schedule;
  p.sequence_parallel = layout.sequence_parallel;
  config.recompute = layout.recompute;
  p.zero.stage = layout.zero_stage;
  p.zero.gradient_reduction = layout.gradient_reduction;
  p.zero.hierarchical_partition = layout.hpz;
  p.zero.quantized_weights = layout.qwz;
  p.zero.quantized_gradients = layout.qgz;
  p.pp_layers = layout.pp_layers;
  p.gpus_per_node = layout.gpus_per_node;
  p.virtual_stages = layout.virtual_stages;
  p.ep = layout.ep;
  p.cp = layout.cp;
  p.cp_comm = layout.cp_comm;
  config_detail::validate_config(config, config_detail::ConfigSource("plan"));
  return config;
}

// The pipeline schedules, each with its chunks per rank, worth pricing for `pp` stages of
// `base`'s model with micro-batches of `micro_batch` sequences on `dp` data-parallel ranks (what
// the trainer's validation would refuse is left out here, where it is cheap to see).
std::vector<std::pair<PipelineSchedule, int>> schedules_for(const Config& base, int pp, int dp,
                                                            int micro_batch,
                                                            const SearchOptions& options) {
  // One stage has no bubble: 1f1b is its plain accumulation loop.
  if (pp == 1) return {{PipelineSchedule::one_f_one_b, 1}};
  std::vector<std::pair<PipelineSchedule, int>> schedules = {{PipelineSchedule::one_f_one_b, 1},
                                                             {PipelineSchedule::gpipe, 1},
                                                             {PipelineSchedule::zb_h1, 1},
                                                             {PipelineSchedule::zb_h2, 1}};
  if (!options.virtual_stages) return schedules;
  const int layers = base.model.n_layer;
  // Interleaved walks whole groups of pp micro-batches; its chunks are capped at 4 to keep the
  // search small (each more chunk adds a message per micro-batch and shrinks the bubble less).
  const int micro_batches = base.train.global_batch / (micro_batch * dp);
  if (micro_batches % pp == 0)
    for (int chunks = 2; chunks <= 4 && pp * chunks <= layers; ++chunks)
      schedules.push_back({PipelineSchedule::interleaved, chunks});
  if (pp * 2 <= layers) schedules.push_back({PipelineSchedule::zbv, 2});
  return schedules;
}

// The expert-parallel degrees to try with `dp` data-parallel ranks: every divisor of dp and the
// experts when `experts` is, else 1 alone.
std::vector<int> expert_parallel_degrees(int dp, int experts) {
  if (experts == 0) return {1};
  return divisors(std::gcd(dp, experts));
}

// The context-parallel degrees worth pricing for `ranks` ranks (a divisor of it), each with its
// K/V's ways: cp 1, and where `context` allows it every cp that cuts the sequence into 2·cp
// chunks, by ring and by all_gather.
std::vector<std::pair<int, ContextComm>> context_degrees(const Config& base, int ranks,
                                                         bool context) {
  std::vector<std::pair<int, ContextComm>> degrees{{1, ContextComm::ring}};
  if (!context) return degrees;
  for (int cp : divisors(ranks))
    if (cp > 1 && base.model.seq_len % (2 * cp) == 0)
      for (ContextComm comm : {ContextComm::ring, ContextComm::all_gather})
        degrees.emplace_back(cp, comm);
  return degrees;
}

// The candidate layouts before the stage split (balanced layers). `experts`: the experts that
// expert parallelism may split (0: none, ep 1 only); `context`: context parallelism may run.
std::vector<PlanLayout> enumerate_layouts(const Config& base, int world, int experts, bool context,
                                          const SearchOptions& options) {
  std::vector<PlanLayout> layouts;
  const int per_node = base.parallel.gpus_per_node;
  const bool spans_nodes = world > per_node;
  for (int tp : divisors(world)) {
    if (tp > per_node && spans_nodes) continue;
    for (int pp : divisors(world / tp)) {
      if (pp > base.model.n_layer) continue;
      for (const auto& [cp, cp_comm] : context_degrees(base, world / (tp * pp), context)) {
        const int dp = world / (tp * pp * cp);
        if (base.train.global_batch % dp != 0) continue;
        for (int ep : expert_parallel_degrees(dp, experts))
          for (int micro_batch : divisors(base.train.global_batch / dp))
            for (const auto& [schedule, chunks] :
                 schedules_for(base, pp, dp, micro_batch, options)) {
              for (bool sp : {false, true}) {
                if (sp && tp == 1) continue;
                for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
                  // ZeRO shards over the replicas (dp × cp), under expert parallelism over the
                  // dp/ep ranks holding the same experts: none to shard over when they are one.
                  for (int stage = 0; stage <= (dp * cp / ep > 1 ? 3 : 0); ++stage)
                    for (GradientReduction reduction :
                         {GradientReduction::step, GradientReduction::micro_batch}) {
                      if (stage < 2 && reduction != GradientReduction::step) continue;
                      for (int plus = 0; plus < 8; ++plus) {
                        const bool hpz = plus & 1, qwz = plus & 2, qgz = plus & 4;
                        if (plus != 0 && stage != 3) continue;
                        if (hpz && !spans_nodes) continue;
                        if ((qwz || qgz) && !options.quantized) continue;
                        if (qgz && !spans_nodes) continue;
                        // They split all of dp by node.
                        if ((hpz || qgz) && (ep > 1 || cp > 1)) continue;
                        layouts.push_back(PlanLayout{tp,
                                                     pp,
                                                     dp,
                                                     micro_batch,
                                                     schedule,
                                                     sp,
                                                     recompute,
                                                     stage,
                                                     reduction,
                                                     hpz,
                                                     qwz,
                                                     qgz,
                                                     {},
                                                     per_node,
                                                     chunks,
                                                     ep,
                                                     cp,
                                                     cp_comm});
                      }
                    }
              }
            }
      }
    }
  }
  return layouts;
}

// The layers of each stage under `config`'s split.
std::vector<int> layers_per_stage(const Config& config, int pp) {
  std::vector<int> layers;
  for (const auto& [begin, end] :
       stage_layer_ranges(config.model.n_layer, pp, config.parallel.pp_layers))
    layers.push_back(end - begin);
  return layers;
}

// A split giving stage `stage` `count` layers and the others as many as they need (one each
// before it, the rest after, spread): what prices a stage's cost for the dynamic programme.
std::vector<int> split_with(int n_layer, int pp, int stage, int count) {
  std::vector<int> layers(static_cast<std::size_t>(pp), 1);
  layers[static_cast<std::size_t>(stage)] = count;
  int rest = n_layer - count - (pp - 1);
  for (int s = 0; rest > 0; s = (s + 1) % pp)
    if (s != stage) {
      ++layers[static_cast<std::size_t>(s)];
      --rest;
    }
  return layers;
}

// Re-splits a pipelined plan's layers: per-stage costs memoised on (stage, layer count).
std::optional<std::vector<int>> rebalanced_split(const PlanCost& plan, const ClusterSpec& cluster,
                                                 int world) {
  const int pp = plan.layout.pp, n = plan.config.model.n_layer;
  std::map<std::pair<int, int>, std::pair<double, bool>> memo;  // (stage, layers) -> (time, fits)
  const auto cost = [&](int stage, int count) {
    const auto key = std::make_pair(stage, count);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    if (count > n - (pp - 1)) return memo[key] = {1e300, false};
    Config config = plan.config;
    config.parallel.pp_layers = split_with(n, pp, stage, count);
    const StepTime t = predict_step_time(config, cluster, world);
    const StageTime& s = t.stages[static_cast<std::size_t>(stage)];
    const MemoryAccount m = on_device(predict_memory(config, world, stage), cluster, config);
    return memo[key] = {s.forward + s.backward, total_bytes(m) <= plan.limit_bytes};
  };
  const StageCostModel model{
      [&](int stage, int begin, int end) { return cost(stage, end - begin).first; },
      [&](int stage, int begin, int end) { return cost(stage, end - begin).second; }};
  const std::optional<StageSplit> split = split_stages(n, pp, model);
  if (!split) return std::nullopt;
  return split->layers;
}

bool faster(const PlanCost& a, const PlanCost& b) {
  if (a.fits() != b.fits()) return a.fits();
  if (!a.fits() || a.time.seconds == b.time.seconds) return a.memory_bytes < b.memory_bytes;
  return a.time.seconds < b.time.seconds;
}

}  // namespace

PlanCost cost_of(const Config& config, const ClusterSpec& cluster, int world_size) {
  PlanCost plan;
  plan.config = config;
  const MeshShape mesh = resolve_mesh(config, world_size);
  const ParallelConfig& p = config.parallel;
  plan.layout = PlanLayout{mesh.tp,
                           mesh.pp,
                           mesh.dp,
                           config.train.micro_batch,
                           p.pipeline_schedule,
                           p.sequence_parallel,
                           config.recompute,
                           p.zero.stage,
                           p.zero.gradient_reduction,
                           p.zero.hierarchical_partition,
                           p.zero.quantized_weights,
                           p.zero.quantized_gradients,
                           p.pp_layers,
                           p.gpus_per_node,
                           p.virtual_stages,
                           mesh.ep,
                           mesh.cp,
                           p.cp_comm};
  plan.time = predict_step_time(config, cluster, world_size);
  plan.limit_bytes = static_cast<std::size_t>(cluster.device.memory_gib * 1024.0 * 1048576.0);
  for (int stage = 0; stage < mesh.pp; ++stage) {
    plan.stage_memory.push_back(
        on_device(predict_memory(config, world_size, stage), cluster, config));
    plan.memory_bytes = std::max(plan.memory_bytes, total_bytes(plan.stage_memory.back()));
  }
  return plan;
}

std::vector<PlanCost> search_layouts(const Config& base_config, const ClusterSpec& cluster,
                                     int world_size, const SearchOptions& options) {
  if (world_size < 1 || world_size > cluster.devices())
    fail("a world of ", world_size, " devices does not fit cluster '", cluster.name, "' (",
         cluster.devices(), " devices)");
  Config base = base_config;
  // A cpu cluster is one host: its nodes are the config's simulated ones (parallel.gpus_per_node).
  if (cluster.backend != ClusterBackend::cpu)
    base.parallel.gpus_per_node = cluster.devices_per_node;
  base.parallel.pp_layers.clear();
  base.diloco.enabled = false;
  // Expert parallelism: on either backend, and per DiLoCo worker. Context parallelism: on the
  // CPU backend (its CUDA path has never run on a GPU), without experts (their capacity groups are
  // whole sequences).
  const int experts = base.model.moe.experts;
  const bool context = cluster.backend == ClusterBackend::cpu && experts == 0;
  std::vector<PlanCost> plans;
  for (const PlanLayout& layout : enumerate_layouts(base, world_size, experts, context, options)) {
    Config config;
    try {
      config = with_layout(base, layout);
      resolve_mesh(config, world_size);  // the world-dependent checks
    } catch (const Error&) {
      continue;  // a layout the trainer refuses (its message is the trainer's business)
    }
    plans.push_back(cost_of(config, cluster, world_size));
  }
  std::sort(plans.begin(), plans.end(), faster);
  if (options.rebalance) {
    // The best pipelined plans; when none fits, the closest ones (a split may make them fit).
    const bool any_fits = !plans.empty() && plans.front().fits();
    int refined = 0;
    for (PlanCost& plan : plans) {
      if (refined >= 16) break;
      // The split is over stages: a plan of several chunks per rank keeps its balanced one.
      if (plan.layout.pp == 1 || plan.layout.virtual_stages != 1 || plan.fits() != any_fits)
        continue;
      // Each (stage, layers) cost prices every stage: keep the programme small.
      if (plan.layout.pp * plan.config.model.n_layer > 1024) continue;
      ++refined;
      const std::optional<std::vector<int>> split = rebalanced_split(plan, cluster, world_size);
      if (!split || *split == layers_per_stage(plan.config, plan.layout.pp)) continue;
      Config config = plan.config;
      config.parallel.pp_layers = *split;
      PlanCost better = cost_of(config, cluster, world_size);
      if (faster(better, plan)) plan = std::move(better);
    }
    std::sort(plans.begin(), plans.end(), faster);
  }
  return plans;
}

PlanCost best_layout(const Config& base, const ClusterSpec& cluster, int world_size,
                     const SearchOptions& options) {
  return best_of(search_layouts(base, cluster, world_size, options), cluster, world_size);
}

PlanCost best_of(const std::vector<PlanCost>& plans, const ClusterSpec& cluster, int world_size) {
  if (plans.empty())
    fail("no layout of this model can run on ", world_size,
         " devices (tensor parallelism must divide the heads, pipeline stages the layers, data "
         "parallelism the global batch)");
  const PlanCost& first = plans.front();
  if (first.fits()) return first;
  // Nothing fits: the closest plan is the one needing the least memory (sorted first).
  const auto stage = std::max_element(first.stage_memory.begin(), first.stage_memory.end(),
                                      [](const MemoryAccount& a, const MemoryAccount& b) {
                                        return total_bytes(a) < total_bytes(b);
                                      });
  const MemoryAccount& m = *stage;
  std::vector<std::pair<std::size_t, std::string>> parts = {
      {m.master_weights, "master weights"},
      {m.compute_weights, "compute weights"},
      {m.gradients, "gradients"},
      {m.optimizer_state, "optimizer state"},
      {m.activations, "activations"},
      {m.gathered_weights, "gathered weights"},
      {m.gradient_buckets, "gradient buckets"},
      {m.secondary_weights, "secondary weights"},
      {m.communication, "communication scratch"}};
  std::sort(parts.begin(), parts.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  fail("nothing fits: no layout of this model fits ", world_size, " devices of ",
       gib_text(static_cast<double>(first.limit_bytes)), " (cluster '", cluster.name,
       "'); the closest is ", first.layout.name(), ", whose stage ",
       stage - first.stage_memory.begin(), " needs ",
       gib_text(static_cast<double>(first.memory_bytes)), " (", parts[0].second, " ",
       gib_text(static_cast<double>(parts[0].first)), ", ", parts[1].second, " ",
       gib_text(static_cast<double>(parts[1].first)), ", ", parts[2].second, " ",
       gib_text(static_cast<double>(parts[2].first)),
       "): ", gib_text(static_cast<double>(first.memory_bytes - first.limit_bytes)),
       " over; use more devices, a smaller micro-batch or model, or a cluster with more memory");
}

}  // namespace strata
