// The planner on a mixture of experts (plan/: memory, compute, communication, search with
// parallel.ep): expert parallelism divides the experts' weights, gradients and optimizer state per
// rank by ep and ZeRO shards over expert_dp; the MoE blocks' activations and FLOPs are those of
// balanced routing (the router, top_k experts per token, capacity-limited); the token exchange
// sends the hand-computed bytes over the ep group's links, forward, backward and again under full
// recompute, and its seconds are α–β over them; the search tries ep, picks it where the experts
// dominate memory, and proposes nothing the trainer refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/activation_sizes.h"
#include "model/parameter_layout.h"
#include "plan/comm_model.h"
#include "plan/compute_model.h"
#include "plan/config.h"
#include "plan/memory_model.h"
#include "plan/search.h"
#include "plan/step_time.h"
#include "tests/support/plan_support.h"

namespace strata {
namespace {

using testing::planner_config;
using testing::test_cluster;

// The planner's test model (8 layers, width 512, sequence 256, micro-batches of 4 of a global
// batch of 32) with 8 experts in every second block (4 MoE blocks), top-2, dropless.
constexpr std::uint64_t kC = 512, kT = 256, kExperts = 8, kTopK = 2, kMoeBlocks = 4;
constexpr std::uint64_t kRows = 4 * kT;                      // N of a micro-batch
constexpr std::uint64_t kExpertSize = 8 * kC * kC + 5 * kC;  // one expert's MLP
constexpr std::uint64_t kExpertRows = kRows * kTopK;         // balanced, dropless: N·k

Config moe(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.moe.experts=8", "model.moe.top_k=2", "model.moe.every=2",
                                   "model.moe.capacity_factor=0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return planner_config(sets);
}

TEST(PlanMoe, ExpertParallelismDividesTheExpertsStateByEp) {
  const MemoryAccount whole = predict_memory(moe({"parallel.dp=4"}), 4);
  for (std::uint64_t ep : {2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    const MemoryAccount split =
        predict_memory(moe({"parallel.dp=4", "parallel.ep=" + std::to_string(ep)}), 4);
    // Each MoE block holds its router and E/ep experts: the other experts' fp32 weights,
    // gradients and AdamW moments are gone.
    const std::uint64_t gone = kMoeBlocks * (kExperts - kExperts / ep) * kExpertSize * 4;
    EXPECT_EQ(whole.master_weights - split.master_weights, gone);
    EXPECT_EQ(whole.gradients - split.gradients, gone);
    EXPECT_EQ(whole.optimizer_state - split.optimizer_state, 2 * gone);
    // Balanced routing: every rank's experts compute as many rows as its tokens sent out.
    EXPECT_EQ(split.activations, whole.activations);
  }
  // ZeRO 1 under ep 2 of dp 4 shards the AdamW state over the 2 ranks holding the same experts.
  const MemoryAccount zero1 =
      predict_memory(moe({"parallel.dp=4", "parallel.ep=2", "parallel.zero.stage=1"}), 4);
  const std::size_t total = zero1.master_weights / 4;
  EXPECT_EQ(zero1.optimizer_state, 2 * 4 * ParameterLayout::padded_size(total, 2) / 2);
}

TEST(PlanMoe, ActivationsAndFlopsAreThoseOfBalancedRouting) {
  const Config dense = planner_config({});
  const Config experts = moe();
  const GptShape shape = gpt_shape_of(experts.model);
  // Dropless: N·k assignments; under capacity 0.5 (ceil(0.5·2·256/8) = 32 per expert and
  // sequence) each of the 4 sequences keeps 8·32 = 256 of its 512 choices.
  EXPECT_EQ(moe_balanced_assignments(shape.moe, kRows, kT), kExpertRows);
  MoeConfig capped = shape.moe;
  capped.capacity_factor = 0.5;
  EXPECT_EQ(moe_balanced_assignments(capped, kRows, kT), 4u * 256);

  // A slot's MoeActivations per MoE block: x, probs, dlogits, lse, gates, out, xe, dout, pre,
  // act, dpre.
  const std::uint64_t N = kRows, E = kExperts, A = kExpertRows, R = kExpertRows, H = 4 * kC;
  const ActivationElements a =
      activation_elements(shape, ModelPartition::whole(shape), 4, Recompute::none);
  EXPECT_EQ(a.moe_per_slot,
            kMoeBlocks * (N * kC + 2 * N * E + N + N * kTopK + A * kC + 2 * R * kC + 3 * R * H));
  // The rest of the slot is the dense model's less the MoE blocks' unused MLP buffers (fch and
  // fch_gelu, N·4C each).
  EXPECT_EQ(a.per_slot, activation_elements(gpt_shape_of(dense.model), ModelPartition::whole(shape),
                                            4, Recompute::none)
                                .per_slot -
                            kMoeBlocks * 2 * N * H);

  // An MoE block's GEMMs: the router (2·N·C·E) and k experts per token (16·N·k·C²) instead of
  // the dense MLP's 16·N·C².
  const double n = N, c = kC;
  const auto forward_flops = [&](const Config& config) {
    return micro_batch_work(config, ModelPartition::whole(gpt_shape_of(config.model)), 4)
        .forward.gemm_flops;
  };
  EXPECT_DOUBLE_EQ(forward_flops(experts) - forward_flops(dense),
                   kMoeBlocks * (2 * n * c * E + 16 * (kTopK - 1) * n * c * c));
  // Its GEMM calls read the router's E·C fp32 weights and each held expert's 8·C² instead of the
  // dense MLP's 8·C² (fp32 activations here): under ep 2 four experts per block, not eight.
  const auto weight_bytes = [&](const Config& config) {
    return micro_batch_work(config, ModelPartition::whole(gpt_shape_of(config.model)), 4)
        .forward.weight_bytes;
  };
  for (double held : {8.0, 4.0})
    EXPECT_DOUBLE_EQ(weight_bytes(held == 8 ? experts : moe({"parallel.dp=2", "parallel.ep=2"})) -
                         weight_bytes(dense),
                     kMoeBlocks * (4 * E * c + 4 * (held - 1) * 8 * c * c))
        << held << " experts held";
  // MFU counts the model FLOPs of GptShape: the router and top_k experts of each MoE block.
  const ClusterSpec cluster = test_cluster(80, 10);
  const StepTime step = predict_step_time(experts, cluster, 1);
  EXPECT_NEAR(step.mfu * step.seconds * cluster.device.peak_tflops.of(cpu::ComputeDtype::fp32) *
                  1e12 / (32.0 * kT),
              shape.flops_per_token(), 1e-6 * shape.flops_per_token());
  EXPECT_GT(shape.flops_per_token(), gpt_shape_of(dense.model).flops_per_token());
}

// SwiGLU experts of width F (model.mlp swiglu, model.d_ff): a slot's MoE arrays hold the fc
// product's 2F columns twice (pre, dpre) and silu(gate)·up's F once, and the experts' GEMMs are
// the dense SwiGLU MLP's three matrices on each routed row.
TEST(PlanMoe, SwigluExpertsCountTheirThreeMatrices) {
  const std::vector<std::string> swiglu = {"model.mlp=swiglu", "model.d_ff=1024",
                                           "model.bias=false"};
  const Config dense = planner_config(swiglu);
  const Config experts = moe(swiglu);
  const GptShape shape = gpt_shape_of(experts.model);
  const std::uint64_t N = kRows, E = kExperts, A = kExpertRows, R = kExpertRows, F = 1024;
  const ActivationElements a =
      activation_elements(shape, ModelPartition::whole(shape), 4, Recompute::none);
  EXPECT_EQ(a.moe_per_slot, kMoeBlocks * (N * kC + 2 * N * E + N + N * kTopK + A * kC + 2 * R * kC +
                                          2 * R * 2 * F + R * F));
  // The MoE blocks have no fch (N·2F) nor fch_gelu (N·F).
  EXPECT_EQ(a.per_slot, activation_elements(gpt_shape_of(dense.model), ModelPartition::whole(shape),
                                            4, Recompute::none)
                                .per_slot -
                            kMoeBlocks * 3 * N * F);
  const auto work = [&](const Config& config) {
    return micro_batch_work(config, ModelPartition::whole(gpt_shape_of(config.model)), 4);
  };
  // The router and k experts per token of 2·N·C·3F each, instead of the dense MLP's one; the
  // weight gradients the same, the router's over the rank's rows.
  const double n = N, c = kC, f = F;
  const double experts_flops = 2 * n * c * E + 2 * (kTopK - 1) * n * c * 3 * f;
  EXPECT_DOUBLE_EQ(work(experts).forward.gemm_flops - work(dense).forward.gemm_flops,
                   kMoeBlocks * experts_flops);
  EXPECT_DOUBLE_EQ(work(experts).weight.gemm_flops - work(dense).weight.gemm_flops,
                   kMoeBlocks * experts_flops);
  // The GEMM calls read the router's fp32 weights and each expert's 3·C·F instead of one MLP's.
  EXPECT_DOUBLE_EQ(work(experts).forward.weight_bytes - work(dense).forward.weight_bytes,
                   kMoeBlocks * (4 * E * c + 4 * (E - 1) * 3 * c * f));
}

// This rank's all-to-all bytes over ep per step, and the messages of its MoE exchanges.
std::uint64_t exchange_bytes(const CommPrediction& p) {
  std::uint64_t bytes = 0;
  for (const CommEvent& e : p.events)
    if (e.group == CommGroup::ep && e.kind == "all_to_all") bytes += e.total_bytes() * e.repeats;
  return bytes;
}

TEST(PlanMoe, TheTokenExchangeSendsTheBalancedRowsOverEp) {
  // dp 4, ep 2: 2 micro-batches per step through 4 MoE blocks. Per block and micro-batch a rank
  // sends the other member E/ep int32 counts and half of its N·k rows, C fp32 each, in each of
  // four exchanges (dispatch, combine, gradient dispatch, gradient combine); a full recompute
  // reruns the counts, the dispatch and the combine.
  const std::uint64_t passes = kMoeBlocks * 2, ep = 2;
  const std::uint64_t counts = (ep - 1) * (kExperts / ep) * 4;
  const std::uint64_t rows = (ep - 1) * (kExpertRows / ep) * kC * 4;
  const CommPrediction plain = predict_communication(moe({"parallel.dp=4", "parallel.ep=2"}), 4);
  EXPECT_EQ(exchange_bytes(plain), passes * (counts + 4 * rows));
  const CommPrediction full =
      predict_communication(moe({"parallel.dp=4", "parallel.ep=2", "recompute=full"}), 4);
  EXPECT_EQ(exchange_bytes(full), passes * (2 * counts + 6 * rows));
  // Without expert parallelism there is no exchange; under tensor parallelism the gates'
  // gradient (N·k fp32) is summed over tp: a ring all-reduce of 2 ranks sends it once.
  EXPECT_EQ(exchange_bytes(predict_communication(moe({"parallel.dp=4"}), 4)), 0u);
  std::uint64_t gate_sums = 0;
  for (const CommEvent& e :
       predict_communication(moe({"parallel.tp=2", "parallel.dp=4", "parallel.ep=2"}), 8).events)
    if (e.what == "MoE gate gradient sums") gate_sums += e.total_bytes() * e.repeats;
  EXPECT_EQ(gate_sums, passes * kRows * kTopK * 4);

  // The experts' gradients are summed over expert_dp (the 2 ranks holding the same experts), the
  // dense ones over dp; with ZeRO 2 the segments are reduce-scattered over expert_dp after their
  // dense part is summed over ep, and dp carries the loss alone.
  std::uint64_t expert_sums = 0;
  for (const CommEvent& e : plain.events)
    if (e.group == CommGroup::expert_dp) expert_sums += e.total_bytes() * e.repeats;
  EXPECT_EQ(expert_sums, kMoeBlocks * (kExperts / ep) * kExpertSize * 4);  // ring of 2: once
  const CommPrediction zero2 =
      predict_communication(moe({"parallel.dp=4", "parallel.ep=2", "parallel.zero.stage=2"}), 4);
  bool scattered = false, summed = false;
  for (const CommEvent& e : zero2.events) {
    if (e.group == CommGroup::dp) {
      EXPECT_EQ(e.what, "loss");
    }
    scattered |= e.group == CommGroup::expert_dp && e.kind == "reduce_scatter";
    summed |= e.group == CommGroup::ep && e.kind == "all_reduce" &&
              e.what == std::string("segment dense gradient sum over ep");
  }
  EXPECT_TRUE(scattered);
  EXPECT_TRUE(summed);
}

TEST(PlanMoe, TheExchangeIsPricedOnTheLinksOfTheEpGroup) {
  // Nodes of 2: ep 2 of dp 4 stays inside a node, ep 4 crosses to the other node.
  const auto links = [](const Config& config) {
    std::map<LinkClass, std::uint64_t> by_link;
    for (const CommEvent& e : predict_communication(config, 4).events)
      if (e.group == CommGroup::ep && e.kind == "all_to_all")
        for (const auto& [link, bytes] : e.bytes) by_link[link] += bytes * e.repeats;
    return by_link;
  };
  const auto inside = links(moe({"parallel.dp=4", "parallel.ep=2", "parallel.gpus_per_node=2"}));
  EXPECT_EQ(inside.size(), 1u);
  EXPECT_TRUE(inside.contains(LinkClass::intra_node));
  const auto across = links(moe({"parallel.dp=4", "parallel.ep=4", "parallel.gpus_per_node=2"}));
  EXPECT_GT(across.at(LinkClass::inter_node), across.at(LinkClass::intra_node));

  // Its time is α–β per exchange, inside the passes: per block and micro-batch one message
  // each way of E/ep counts, and four of N·k/2 rows, at 2 us and 100 GB/s inside a node.
  const ClusterSpec cluster = test_cluster(80, 10);
  const StepTime step = predict_step_time(
      moe({"parallel.dp=4", "parallel.ep=2", "parallel.gpus_per_node=2"}), cluster, 4);
  const double rows = (kExpertRows / 2) * kC * 4.0;
  const double exchange = (2e-6 + 16 / 100e9) + 4 * (2e-6 + rows / 100e9);
  EXPECT_NEAR(step.stages[0].pass_comm, kMoeBlocks * 2 * exchange, 1e-12);
  const StepTime apart = predict_step_time(
      moe({"parallel.dp=4", "parallel.ep=2", "parallel.gpus_per_node=1"}), cluster, 4);
  EXPECT_GT(apart.stages[0].pass_comm, 5 * step.stages[0].pass_comm);
}

// One host of 4 cores and 4 ranks with `memory_gib` each.
ClusterSpec cpu_cluster(double memory_gib) {
  ClusterSpec c = test_cluster(memory_gib, 10);
  c.backend = ClusterBackend::cpu;
  c.nodes = 1;
  c.devices_per_node = 4;
  c.cores_per_node = 4;
  return c;
}

// 16 experts in every block of a small model: the experts are 97% of its parameters.
Config expert_heavy(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.n_layer=4",
                                   "model.n_head=4",
                                   "model.d_model=256",
                                   "model.seq_len=64",
                                   "model.vocab_size=1024",
                                   "train.global_batch=8",
                                   "train.micro_batch=2",
                                   "model.moe.experts=16",
                                   "model.moe.every=1",
                                   "model.moe.top_k=2",
                                   "model.moe.capacity_factor=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return planner_config(sets);
}

SearchOptions quick() {
  SearchOptions options;
  options.rebalance = false;
  options.virtual_stages = false;
  return options;
}

TEST(PlanMoe, TheSearchSplitsTheExpertsWhereTheyDominateMemory) {
  // 4 blocks of 16 experts of 8·256² + 5·256 parameters: 34 M parameters, 0.54 GB of fp32
  // weights, gradients and AdamW moments; 0.25 GiB per rank fits only a fraction of them.
  const ClusterSpec cluster = cpu_cluster(0.25);
  const std::vector<PlanCost> plans = search_layouts(expert_heavy(), cluster, 4, quick());
  ASSERT_FALSE(plans.empty());
  const PlanCost& best = best_of(plans, cluster, 4);
  EXPECT_GT(best.layout.ep, 1) << best.layout.name();
  EXPECT_NE(best.layout.name().find(" ep"), std::string::npos) << best.layout.name();
  bool dense_dp_fits = false, tried_ep4 = false;
  for (const PlanCost& plan : plans) {
    const PlanLayout& l = plan.layout;
    if (l.dp == 4 && l.ep == 1 && l.zero_stage == 0) dense_dp_fits |= plan.fits();
    tried_ep4 |= l.ep == 4;
  }
  EXPECT_FALSE(dense_dp_fits);  // replicating every expert on every rank does not fit
  EXPECT_TRUE(tried_ep4);
  // The chosen plan's overrides (the --out fragment's keys) select it again.
  const Config again =
      parse_config(config_to_yaml(expert_heavy()), "again", best.layout.overrides());
  EXPECT_EQ(again.parallel.ep, best.layout.ep);
  const PlanCost cost = cost_of(again, cluster, 4);
  EXPECT_EQ(cost.layout.name(), best.layout.name());
  EXPECT_DOUBLE_EQ(cost.time.seconds, best.time.seconds);
  EXPECT_EQ(cost.memory_bytes, best.memory_bytes);
}

TEST(PlanMoe, TheSearchProposesNoExpertLayoutTheTrainerRefuses) {
  const ClusterSpec cluster = cpu_cluster(80);
  const std::vector<PlanCost> plans = search_layouts(expert_heavy(), cluster, 4, quick());
  for (const PlanCost& plan : plans) {
    const PlanLayout& l = plan.layout;
    EXPECT_EQ(l.dp % l.ep, 0) << l.name();
    EXPECT_EQ(16 % l.ep, 0) << l.name();
    if (l.ep == 1) continue;
    EXPECT_FALSE(l.hpz || l.qgz) << l.name();
    EXPECT_TRUE(l.zero_stage == 0 || l.dp > l.ep) << l.name();
  }
  // Every layout the trainer's validation accepts as a run config (its overrides re-parsed).
  for (std::size_t i = 0; i < plans.size(); i += 11)
    EXPECT_NO_THROW(
        parse_config(config_to_yaml(expert_heavy()), "again", plans[i].layout.overrides()))
        << plans[i].layout.name();
  // No ep without experts; ep per DiLoCo worker and on GPU clusters too.
  const auto most_ep = [](const std::vector<PlanCost>& found) {
    int most = 0;
    for (const PlanCost& plan : found) most = std::max(most, plan.layout.ep);
    return most;
  };
  EXPECT_EQ(most_ep(plans), 4);
  EXPECT_EQ(most_ep(search_layouts(expert_heavy({"model.moe.experts=0"}), cluster, 4, quick())), 1);
  EXPECT_GT(most_ep(search_layouts(expert_heavy({"diloco.enabled=true", "diloco.workers=1"}),
                                   cluster, 4, quick())),
            1);
  EXPECT_GT(most_ep(search_layouts(expert_heavy(), test_cluster(80), 4, quick())), 1);
}

}  // namespace
}  // namespace strata
