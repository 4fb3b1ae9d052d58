// Whole-model checks: the GPT backward against finite differences (double precision), layout-
// independent initialisation, and convergence on one fixed batch.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "model/kernels/cpu/adamw.h"
#include "tests/support/model_shapes.h"

namespace strata {
namespace {

GptShape tiny_shape() { return GptShape{2, 2, 8, 5, 11}; }

// The whole model's backward against central differences of its loss (cross-entropy plus, with
// experts, their router losses), every parameter.
void expect_gradient_matches_finite_differences(const GptShape& shape) {
  Gpt<double> model(shape, 2);
  const std::size_t n = model.layout().total();
  std::vector<double> params(n), grads(n, 0.0);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (double& p : params) p = normal(rng);
  // LayerNorm gains near 1 keep the network well conditioned.
  for (const TensorView& t : model.layout().tensors())
    if (t.shape.size() == 1 && t.name.ends_with(".weight"))
      for (std::size_t i = 0; i < t.size; ++i) params[t.offset + i] += 1.0;
  const std::vector<std::int32_t> tokens = {1, 4, 7, 2, 9, 10, 0, 3, 3, 5};
  const std::vector<std::int32_t> targets = {4, 7, 2, 9, 10, 0, 3, 3, 5, 6};
  const auto loss = [&] {
    return model.forward(params.data(), tokens.data(), targets.data(), 2, 5) + model.moe_loss();
  };

  loss();
  model.backward(params.data(), grads.data(), 1.0);

  const double h = 1e-6;
  double max_error = 0, max_grad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double saved = params[i];
    params[i] = saved + h;
    const double plus = loss();
    params[i] = saved - h;
    const double minus = loss();
    params[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    max_error = std::max(max_error, std::abs(numeric - grads[i]));
    max_grad = std::max(max_grad, std::abs(numeric));
  }
  EXPECT_GT(max_grad, 1e-3);
  EXPECT_LT(max_error, 1e-7) << "largest |finite difference - backward| over all " << n
                             << " parameters";
  // Padded vocabulary rows of wte are never targets and only feed padded logits: zero gradient.
  const TensorView& wte = model.layout().at("wte");
  for (std::size_t i = shape.vocab_size * shape.d_model; i < wte.size; ++i)
    ASSERT_EQ(grads[wte.offset + i], 0.0);
}

TEST(Model, GradientMatchesFiniteDifferences) {
  expect_gradient_matches_finite_differences(tiny_shape());
}

// tiny_shape with experts in its second block (top-2 of 3, a capacity that drops choices),
// router losses on.
GptShape tiny_moe_shape() {
  GptShape shape = tiny_shape();
  shape.moe.experts = 3;
  shape.moe.top_k = 2;
  shape.moe.every = 2;
  shape.moe.capacity_factor = 1.0;  // ceil(2 · 5 / 3) = 4 of a sequence's 10 choices per expert
  shape.moe.aux_loss = 0.1;
  shape.moe.z_loss = 0.05;
  return shape;
}

TEST(Model, ExpertBlockGradientMatchesFiniteDifferences) {
  expect_gradient_matches_finite_differences(tiny_moe_shape());
}

// The Llama family's block (model/gpt_architecture.h): RMSNorm, a SwiGLU MLP, rotary positions,
// multi-query attention (one key/value head for two query heads), no biases, an untied head; on
// `base`'s sizes and experts.
GptShape llama_shape(const GptShape& base = tiny_shape()) {
  GptShape shape = testing::llama_shape(base, 12, 1);
  shape.arch.norm_eps = 1e-6;
  return shape;
}

TEST(Model, LlamaBlockGradientMatchesFiniteDifferences) {
  expect_gradient_matches_finite_differences(llama_shape());
}

// The Llama block with experts: each a SwiGLU MLP of width 12 (the fused gate and up (24, 8),
// proj (8, 12)), no biases anywhere.
TEST(Model, LlamaExpertBlockGradientMatchesFiniteDifferences) {
  const GptShape shape = llama_shape(tiny_moe_shape());
  ASSERT_EQ(shape.expert_shape(), (MoeExpertShape{8, 12, true, false}));
  expect_gradient_matches_finite_differences(shape);
}

// The pieces mixed otherwise: LayerNorm without biases, a GELU MLP of its own width, rotary
// positions with grouped-query attention, the tied head.
TEST(Model, MixedArchitectureGradientMatchesFiniteDifferences) {
  GptShape shape = llama_shape();
  shape.n_head = 4;
  shape.arch.norm = Norm::layernorm;
  shape.arch.mlp = MlpKind::gelu;
  shape.arch.d_ff = 10;
  shape.arch.kv_heads = 2;
  shape.arch.tie_embeddings = true;
  expect_gradient_matches_finite_differences(shape);
}

TEST(Model, InitialisationIsAPureFunctionOfSeedNameAndIndex) {
  const GptShape shape{3, 2, 16, 8, 50};
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::vector<float> a(layout.total()), b(layout.total()), c(layout.total());
  initialize_gpt_parameters(layout, shape, 7, a.data());
  initialize_gpt_parameters(layout, shape, 7, b.data());
  initialize_gpt_parameters(layout, shape, 8, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // A deeper model draws the same values for the tensors both share (names are the key).
  const GptShape deeper{4, 2, 16, 8, 50};
  const ParameterLayout deeper_layout = ParameterLayout::for_gpt(deeper);
  std::vector<float> d(deeper_layout.total());
  initialize_gpt_parameters(deeper_layout, deeper, 7, d.data());
  const TensorView& fc = layout.at("h.1.mlp.fc.weight");
  const TensorView& fc_deeper = deeper_layout.at("h.1.mlp.fc.weight");
  for (std::size_t i = 0; i < fc.size; ++i) ASSERT_EQ(a[fc.offset + i], d[fc_deeper.offset + i]);
  // Statistics: N(0, 0.02) weights, scaled residual projections, unit LayerNorm gains.
  auto stddev = [&](const TensorView& t) {
    double s = 0;
    for (std::size_t i = 0; i < t.size; ++i) s += double(a[t.offset + i]) * a[t.offset + i];
    return std::sqrt(s / t.size);
  };
  EXPECT_NEAR(stddev(fc), 0.02, 0.002);
  EXPECT_NEAR(stddev(layout.at("h.0.mlp.proj.weight")), 0.02 / std::sqrt(6.0), 0.001);
  EXPECT_EQ(a[layout.at("h.2.ln1.weight").offset], 1.0f);
  EXPECT_EQ(a[layout.at("h.2.ln1.bias").offset], 0.0f);
}

TEST(Model, OverfitsOneFixedBatch) {
  const GptShape shape{2, 2, 32, 16, 64};
  const int B = 4;
  Gpt<float> model(shape, B);
  const ParameterLayout& layout = model.layout();
  std::vector<float> params(layout.total()), grads(layout.total()), m(layout.total(), 0.f),
      v(layout.total(), 0.f);
  initialize_gpt_parameters(layout, shape, 3, params.data());
  std::mt19937 rng(5);
  std::vector<std::int32_t> tokens(B * shape.seq_len), targets(B * shape.seq_len);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % shape.vocab_size);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng() % shape.vocab_size);
  float loss = 0;
  int steps = 0;
  for (; steps < 400; ++steps) {
    std::fill(grads.begin(), grads.end(), 0.f);
    loss = model.forward(params.data(), tokens.data(), targets.data(), B, shape.seq_len);
    if (loss < 0.1f) break;
    model.backward(params.data(), grads.data(), 1.0f);
    for (const TensorView& t : layout.tensors())
      cpu::adamw_update(params.data() + t.offset, grads.data() + t.offset, m.data() + t.offset,
                        v.data() + t.offset, static_cast<long>(t.size),
                        {3e-3f, 0.9f, 0.95f, 1e-8f, t.decay ? 0.01f : 0.f, steps + 1, 1.f});
  }
  EXPECT_LT(loss, 0.1f) << "after " << steps << " steps";
}

}  // namespace
}  // namespace strata
