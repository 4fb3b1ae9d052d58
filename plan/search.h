// The layout search: every way to run a model on a cluster's devices that Strata supports, priced
// by the cost model, the fastest that fits first.
//
// Enumerated (intra-operator choices, each checked by the trainer's own config validation):
//   (tp, pp, dp) with tp·pp·dp = world, tp inside a node, tp dividing the heads, pp ≤ layers,
//   dp dividing the global batch; micro-batch: every divisor of global_batch / dp; the pipeline
//   schedule when pp > 1: 1f1b, gpipe, zb-h1, zb-h2, and with several chunks of layers per rank
//   interleaved (v = 2 to 4 chunks, pp·v ≤ layers, micro-batches a multiple of pp) and zbv
//   (pp·2 ≤ layers); sequence parallelism when tp > 1; recompute (none,
//   selective, full); ZeRO stage 0 to 3 when dp > 1, with either gradient reduction for stages
//   2 and 3 and, on stage 3 of a layout spanning nodes, hpZ (exact), and with `quantized`
//   allowed the lossy qwZ and qgZ too; for a mixture of experts on a cpu cluster, expert
//   parallelism ep over every divisor of gcd(dp, experts) (not with hpZ or qgZ, nor ZeRO when
//   ep = dp, nor under DiLoCo: what the trainer refuses; the CUDA model runs no experts yet, so a
//   cuda cluster keeps ep 1).
// For pp > 1 the layers are split over the stages by dynamic programming (plan/stage_split.h,
// Alpa's inter-operator pass): the slowest stage's forward + backward as small as possible, each
// stage within the device memory; candidates start from the balanced split and the best ones
// are re-split (those with one chunk per rank: a chunked plan keeps its balanced virtual stages).
// Memory per device is the largest stage's predicted account (plan/memory_model.h; on a cuda
// cluster computing in bf16/fp16, the compute weights and activations take 2 bytes, not the CPU
// backend's 4), against device.memory_gib. Plans are ranked by predicted step time.
#pragma once

#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/config.h"
#include "plan/memory_account.h"
#include "plan/placement.h"
#include "plan/step_time.h"

namespace strata {

struct PlanLayout {
  int tp = 1, pp = 1, dp = 1;
  int micro_batch = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int zero_stage = 0;
  GradientReduction gradient_reduction = GradientReduction::step;
  bool hpz = false, qwz = false, qgz = false;
  std::vector<int> pp_layers;  // empty: balanced
  int gpus_per_node = 8;       // the cluster's nodes (parallel.gpus_per_node)
  int virtual_stages = 1;      // chunks per rank (parallel.virtual_stages: interleaved, zbv)
  int ep = 1;                  // expert parallelism (parallel.ep), a divisor of dp and experts
  int cp = 1;                  // context parallelism (parallel.cp) and its K/V's way
  ContextComm cp_comm = ContextComm::ring;

  // The `--set` overrides that select this layout (every layout key, so the result does not
  // depend on what the config said).
  std::vector<std::string> overrides() const;
  // e.g. "tp2 pp2 dp2 mb4 1f1b sp zero1 recompute=selective", "tp1 pp2 dp4 mb2 interleaved v3",
  // "tp1 pp1 dp4 ep2 mb2", "tp1 pp1 cp2 dp2 mb4".
  std::string name() const;
};

struct PlanCost {
  PlanLayout layout;
  Config config;  // the base config with the layout applied
  StepTime time;
  std::vector<MemoryAccount> stage_memory;  // per pipeline stage, as the device holds it
  std::size_t memory_bytes = 0;             // the largest stage's total
  std::size_t limit_bytes = 0;
  bool fits() const { return memory_bytes <= limit_bytes; }
};

struct SearchOptions {
  bool quantized = false;  // allow qwZ and qgZ (lossy)
  bool rebalance = true;   // re-split the best pipelined plans by dynamic programming
  // Consider the schedules with several chunks per rank (interleaved, zbv).
  bool virtual_stages = true;
};

// Total bytes of an account.
std::size_t total_bytes(const MemoryAccount& account);

// The cost of `config` as it is (its own layout) on `world_size` devices of `cluster`.
PlanCost cost_of(const Config& config, const ClusterSpec& cluster, int world_size);

// Every valid layout for `base` (its model, batch, precision; its layout keys are replaced) on
// `world_size` devices of `cluster`, fitting ones first by step time, then those that do not fit
// by memory. The nodes are the cluster's (parallel.gpus_per_node becomes devices_per_node), but on
// a cpu cluster, one host, they stay the config's simulated nodes.
std::vector<PlanCost> search_layouts(const Config& base, const ClusterSpec& cluster, int world_size,
                                     const SearchOptions& options = {});

// The fastest layout that fits; a strata::Error when none does, naming the closest plan (the
// one needing the least memory), its largest stage's memory against the limit and the parts
// that take the most.
PlanCost best_layout(const Config& base, const ClusterSpec& cluster, int world_size,
                     const SearchOptions& options = {});

// The same from search_layouts' result.
PlanCost best_of(const std::vector<PlanCost>& plans, const ClusterSpec& cluster, int world_size);

// "1.23 GiB"-style text of a byte count.
std::string gib_text(double bytes);

}  // namespace strata
