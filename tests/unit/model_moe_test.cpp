// The mixture-of-experts MLP on the CPU (model/moe/moe_layer.h): its backward (experts, gates,
// router, the load-balancing and z losses) against central finite differences of its forward in
// double precision, with tokens dropped by capacity and without, for GPT-2's experts and for
// SwiGLU and GELU experts of another width, with biases and without; capacity drops exactly as
// specified on hand-built choices (claim order, groups, ties to the lower expert); the losses'
// values against their direct formulas; top-1's gate is the probability itself; one token's
// router backward (moe_router_backward, shared with the CUDA kernels) against finite
// differences; capacity groups and the load-balancing shares.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "model/kernels/moe_routing.h"
#include "model/moe/moe_layer.h"
#include "model/moe/moe_routing.h"
#include "tests/support/finite_differences.h"

namespace strata {
namespace {

using testing::dot;
using testing::expect_matches_finite_differences;
using testing::random_vector;
using testing::Vec;

struct GradientCase {
  int top_k;
  double capacity_factor;
  const char* name;
  // The experts' MLP: GPT-2's (GELU of 4C, biases) by default.
  int d_ff = 0;  // 0: 4C
  bool swiglu = false;
  bool bias = true;
};

// A perturbation that moved a routing decision (a top-k or capacity boundary) would make the loss
// jump; these random inputs keep every decision clear of its boundary by far more than h.
class MoeGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(MoeGradient, BackwardMatchesFiniteDifferences) {
  const GradientCase param = GetParam();
  MoeConfig config;
  config.experts = 4;
  config.top_k = param.top_k;
  config.capacity_factor = param.capacity_factor;
  config.group_sequences = 1;
  config.aux_loss = 0.3;  // large enough that both losses' gradients matter
  config.z_loss = 0.2;
  const int C = 6, T = 4, B = 3, N = B * T;
  const MoeExpertShape experts{C, param.d_ff > 0 ? param.d_ff : 4 * C, param.swiglu, param.bias};
  const MoeWeightOffsets at = MoeWeightOffsets::of(experts, 1, 4);
  // The router comes first in the weights, so a case's routing is that of the others with its
  // top_k, whatever its experts.
  std::mt19937_64 rng(7 + param.top_k);
  Vec x = random_vector(static_cast<std::size_t>(N) * C, rng);
  Vec w = random_vector(at.total(), rng, 0.5);
  const Vec probe = random_vector(static_cast<std::size_t>(N) * C, rng);  // L = Σ probe ⊙ y + loss
  MoeLayer<double> layer(experts, config);
  ASSERT_EQ(layer.offsets().total(), at.total());
  MoeActivations<double> a;
  Vec y(x.size());
  const auto loss = [&] {
    MoeActivations<double> scratch;
    layer.forward(scratch, x.data(), N, T, w.data(), y.data());
    return dot(probe, y) + layer.loss(scratch);
  };
  const MoeStats stats = layer.forward(a, x.data(), N, T, w.data(), y.data());
  if (param.capacity_factor > 0)
    EXPECT_GT(stats.dropped, 0) << "the case should drop some choices";
  else
    EXPECT_EQ(stats.dropped, 0);
  Vec dx(x.size()), dw(w.size(), 0.0);
  layer.backward_input(a, probe.data(), 1.0, w.data(), dx.data());
  layer.backward_weight(a, dw.data(), 0, N);
  expect_matches_finite_differences(x, dx, loss, "dx");
  expect_matches_finite_differences(w, dw, loss, "dweights");
}

INSTANTIATE_TEST_SUITE_P(
    Moe, MoeGradient,
    ::testing::Values(GradientCase{2, 0.0, "top2_dropless"}, GradientCase{2, 0.75, "top2_capped"},
                      GradientCase{1, 0.0, "top1_dropless"}, GradientCase{1, 1.0, "top1_capped"},
                      GradientCase{3, 0.5, "top3_capped"},
                      GradientCase{2, 0.75, "swiglu_top2_capped", 10, true, false},
                      GradientCase{2, 0.0, "swiglu_top2_dropless_biases", 10, true, true},
                      GradientCase{1, 1.0, "gelu_width10_top1_capped", 10, false, false}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

TEST(MoeRouting, CapacityTakesFirstChoicesBeforeSecondChoicesInTokenOrder) {
  // 4 tokens, 2 choices each, 2 experts, one group, capacity 3.
  //   first choices:  t0 → 0, t1 → 0, t2 → 0, t3 → 1
  //   second choices: t0 → 1, t1 → 1, t2 → 1, t3 → 0
  // Expert 0 takes t0, t1, t2 (full); expert 1 takes t3, then t0 and t1 (full): t2's second
  // choice and t3's second choice are dropped.
  const std::vector<int> choices = {0, 1, 0, 1, 0, 1, 1, 0};
  const MoeRouting r = route_tokens(choices.data(), 4, 2, 2, 4, 3);
  EXPECT_EQ(r.kept, (std::vector<char>{1, 1, 1, 1, 1, 0, 1, 0}));
  EXPECT_EQ(r.dropped(), 2);
  EXPECT_EQ(r.offsets, (std::vector<int>{0, 3, 6}));
  // Grouped by expert, each in token order: expert 0: t0.0, t1.0, t2.0; expert 1: t0.1, t1.1,
  // t3.0 (assignment = token · 2 + choice).
  EXPECT_EQ(r.assignments, (std::vector<int>{0, 2, 4, 1, 3, 6}));
}

TEST(MoeRouting, CapacityCountsPerGroupAndUnlimitedDropsNothing) {
  // 4 tokens all choosing expert 0 first and 1 second, groups of 2 tokens, capacity 1: in each
  // group the first token's first choice and the first token's second choice are kept.
  const std::vector<int> choices = {0, 1, 0, 1, 0, 1, 0, 1};
  const MoeRouting capped = route_tokens(choices.data(), 4, 2, 2, 2, 1);
  EXPECT_EQ(capped.kept, (std::vector<char>{1, 1, 0, 0, 1, 1, 0, 0}));
  const MoeRouting dropless = route_tokens(choices.data(), 4, 2, 2, 2, -1);
  EXPECT_EQ(dropless.dropped(), 0);
  EXPECT_EQ(dropless.assigned(0), 4);
}

TEST(MoeRouting, TiesGoToTheLowerExpertAndGatesRenormalise) {
  const double p[] = {0.1, 0.3, 0.3, 0.3};
  int experts[3];
  moe_top_k(p, 4, 3, experts);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 2);
  EXPECT_EQ(experts[2], 3);
  double gates[2];
  moe_gates(p, experts, 2, gates);
  EXPECT_DOUBLE_EQ(gates[0], 0.5);
  EXPECT_DOUBLE_EQ(gates[1], 0.5);
  moe_gates(p, experts, 1, gates);  // top-1: the probability itself
  EXPECT_DOUBLE_EQ(gates[0], 0.3);
}

TEST(MoeRouting, RouterBackwardIsTheGradientOfTheGatesAndBothLosses) {
  // One token's L(logits) = Σ_j dg_j · gate_j + aux_scale · Σ_e f_e · p_e + z_scale / 2 · lse²,
  // the choices held where the unperturbed logits put them (as a perturbation small enough to
  // cross no routing boundary leaves them): moe_router_backward's dlogits is dL/dlogits.
  const int E = 5;
  for (int k = 1; k <= 3; ++k) {
    std::mt19937_64 rng(20 + k);
    Vec logits = random_vector(E, rng);
    const Vec dgates = random_vector(static_cast<std::size_t>(k), rng);
    const Vec share = random_vector(E, rng, 0.3);
    const double aux_scale = 0.7, z_scale = 0.4;
    std::vector<int> experts(static_cast<std::size_t>(k));
    Vec p(E), gates(static_cast<std::size_t>(k));
    const double lse = moe_softmax(logits.data(), E, p.data());
    moe_top_k(p.data(), E, k, experts.data());
    moe_gates(p.data(), experts.data(), k, gates.data());
    Vec dp(E), dlogits(E);
    moe_router_backward(p.data(), lse, experts.data(), gates.data(), dgates.data(), k, E,
                        share.data(), aux_scale, z_scale, dp.data(), dlogits.data());
    const auto loss = [&] {
      Vec q(E), g(static_cast<std::size_t>(k));
      const double l = moe_softmax(logits.data(), E, q.data());
      moe_gates(q.data(), experts.data(), k, g.data());
      return dot(dgates, g) + aux_scale * dot(share, q) + z_scale / 2 * l * l;
    };
    expect_matches_finite_differences(logits, dlogits, loss, "dlogits");
  }
}

TEST(MoeRouting, GroupsAndChosenShares) {
  // 4 sequences of 8: groups of 2 sequences; 3 do not divide 4, so one group of all of them.
  EXPECT_EQ(capacity_group_tokens(32, 8, 2), 16);
  EXPECT_EQ(capacity_group_tokens(32, 8, 3), 32);
  // 3 tokens, 2 choices: expert 0 chosen 3 times of 6, expert 1 twice, expert 2 once.
  const std::vector<int> choices = {0, 1, 1, 0, 2, 0};
  const std::vector<double> share = chosen_shares(choices.data(), 3, 2, 3);
  EXPECT_DOUBLE_EQ(share[0], 0.5);
  EXPECT_DOUBLE_EQ(share[1], 2.0 / 6);
  EXPECT_DOUBLE_EQ(share[2], 1.0 / 6);
}

TEST(MoeLayer, LossesMatchTheirDirectFormulas) {
  MoeConfig config;
  config.experts = 8;
  config.top_k = 2;
  config.capacity_factor = 1.0;
  config.group_sequences = 2;
  config.aux_loss = 0.01;
  config.z_loss = 0.001;
  const int C = 16, T = 8, B = 4, N = B * T, E = 8;
  const MoeWeightOffsets at{C, E, 4 * C};
  std::mt19937_64 rng(3);
  const Vec x = random_vector(static_cast<std::size_t>(N) * C, rng);
  const Vec w = random_vector(at.total(), rng, 0.3);
  MoeLayer<double> layer(MoeExpertShape::gpt2(C), config);
  MoeActivations<double> a;
  Vec y(x.size());
  const MoeStats stats = layer.forward(a, x.data(), N, T, w.data(), y.data());
  // Direct: logits, softmax, the top-2 counts, f and P.
  double aux = 0, z = 0;
  std::vector<double> chosen(E, 0.0), mean(E, 0.0);
  for (int t = 0; t < N; ++t) {
    std::vector<double> logits(E);
    for (int e = 0; e < E; ++e)
      for (int c = 0; c < C; ++c) logits[e] += x[t * C + c] * w[e * C + c];
    const double most = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double l : logits) sum += std::exp(l - most);
    const double lse = most + std::log(sum);
    z += lse * lse / N;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[a] > logits[b]; });
    chosen[order[0]] += 1.0 / (2.0 * N);
    chosen[order[1]] += 1.0 / (2.0 * N);
    for (int e = 0; e < E; ++e) mean[e] += std::exp(logits[e] - lse) / N;
  }
  for (int e = 0; e < E; ++e) aux += E * chosen[e] * mean[e];
  EXPECT_NEAR(stats.aux, aux, 1e-12);
  EXPECT_NEAR(stats.z, z, 1e-12);
  EXPECT_NEAR(layer.loss(a), 0.01 * aux + 0.001 * z, 1e-14);
  // Capacity: ceil(1.0 · 2 · 16 / 8) = 4 per expert per group of 2 sequences (16 tokens).
  int kept = 0;
  for (int count : stats.tokens_per_expert) {
    EXPECT_LE(count, 4 * (B / 2));
    kept += count;
  }
  EXPECT_EQ(kept + stats.dropped, 2 * N);
}

TEST(MoeLayer, DroppedTokensPassThroughWithNothingAdded) {
  // Capacity 1 per expert per group: every token beyond its experts' first takes nothing, so its
  // output row is exactly zero (the block's residual carries it).
  MoeConfig config;
  config.experts = 2;
  config.top_k = 1;
  config.capacity_factor = 0.25;  // ceil(0.25 · 1 · 4 / 2) = 1
  const int C = 4, T = 4, N = 4;
  const MoeWeightOffsets at{C, 2, 4 * C};
  std::mt19937_64 rng(5);
  const Vec x = random_vector(N * C, rng), w = random_vector(at.total(), rng);
  MoeLayer<double> layer(MoeExpertShape::gpt2(C), config);
  MoeActivations<double> a;
  Vec y(x.size());
  const MoeStats stats = layer.forward(a, x.data(), N, T, w.data(), y.data());
  EXPECT_EQ(stats.dropped, 2);
  int zero_rows = 0;
  for (int t = 0; t < N; ++t) {
    bool zero = true;
    for (int c = 0; c < C; ++c) zero = zero && y[t * C + c] == 0.0;
    zero_rows += zero;
    EXPECT_EQ(zero, !a.routing.kept[t]) << "token " << t;
  }
  EXPECT_EQ(zero_rows, 2);
}

}  // namespace
}  // namespace strata
