// Inputs the CUDA model tests share (tests/cuda/gpt_*_test.cu): GPT-2 parameters with every
// tensor off its initial value, random token batches, the mixture of experts they run, and the
// comparison of two models' routing figures.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/moe/moe_config.h"
#include "model/moe/moe_layer.h"
#include "model/parameter_layout.h"

namespace strata::cuda::testing {

struct Batch {
  std::vector<std::int32_t> tokens, targets;  // (B, T)
};

// `rows` = B·T random token ids and targets below vocab_size: all tokens first, then the targets.
inline Batch random_batch(int vocab_size, std::size_t rows, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int32_t> id(0, vocab_size - 1);
  Batch batch{std::vector<std::int32_t>(rows), std::vector<std::int32_t>(rows)};
  for (std::int32_t& t : batch.tokens) t = id(rng);
  for (std::int32_t& t : batch.targets) t = id(rng);
  return batch;
}

inline std::vector<Batch> random_batches(int count, int vocab_size, std::size_t rows,
                                         std::mt19937_64& rng) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) batches.push_back(random_batch(vocab_size, rows, rng));
  return batches;
}

// GPT-2 initialisation with every bias and LayerNorm weight (the tensors without decay) moved off
// its initial 0 or 1, so that a kernel ignoring one, or its gradient, shows.
inline std::vector<float> random_parameters(const GptShape& shape, std::mt19937_64& rng) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::vector<float> params(layout.total());
  initialize_gpt_parameters(layout, shape, rng(), params.data());
  std::uniform_real_distribution<float> offset(-0.05f, 0.05f);
  for (const TensorView& t : layout.tensors())
    if (!t.decay)
      for (std::size_t i = 0; i < t.size; ++i) params[t.offset + i] += offset(rng);
  return params;
}

// The MoE blocks of the CUDA model tests (docs/ARCHITECTURE.md §5 "Mixture of experts", as
// tests/mpi/moe_layouts_test.cpp): 4 experts, top-2, every second block (1, 3, …), capacity factor
// 1 per sequence (ceil(2·T/4) choices per expert and sequence: an expert chosen by more than half
// of a sequence's tokens drops the rest), both router losses weighted enough to show in every
// gradient.
inline MoeConfig test_experts() {
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.every = 2;
  moe.capacity_factor = 1.0;
  moe.group_sequences = 1;
  moe.aux_loss = 0.05;
  moe.z_loss = 0.01;
  return moe;
}

// Every MoE block's router weights (params in ParameterLayout::for_gpt(shape)) times `factor`:
// GPT-2's initialisation (std 0.02) leaves the probabilities near uniform and the experts evenly
// loaded; at 10× the logits spread over about ±1.6 at C = 64, the loads are uneven and the capacity
// drops choices.
inline void sharpen_routers(const GptShape& shape, std::vector<float>& params,
                            float factor = 10.0f) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  for (int l = 0; l < shape.n_layer; ++l) {
    if (!shape.moe.is_moe_block(l)) continue;
    const TensorView& router = layout.at("h." + std::to_string(l) + ".moe.router.weight");
    for (std::size_t i = 0; i < router.size; ++i) params[router.offset + i] *= factor;
  }
}

// Two models' MoeTotals (model/moe/moe_layer.h) over shape.n_layer blocks: the routing exactly (the
// micro-batches counted, the choices, the dropped choices, the assignments per expert: the same
// tokens went to the same experts), the router losses within `tolerance` relative. Both empty
// without experts. A routing difference means a token's k-th and (k+1)-th probabilities were
// within the two sides' rounding differences: see the inputs' margin where the test draws them.
inline void expect_same_routing(const std::vector<double>& got, const std::vector<double>& want,
                                const GptShape& shape, double tolerance, const std::string& where) {
  if (!shape.moe.enabled()) {
    EXPECT_TRUE(got.empty() && want.empty()) << where;
    return;
  }
  const std::size_t stride = MoeTotals::stride(shape.moe.experts);
  ASSERT_EQ(want.size(), static_cast<std::size_t>(shape.n_layer) * stride) << where;
  ASSERT_EQ(got.size(), want.size()) << where;
  for (int l = 0; l < shape.n_layer; ++l) {
    const double* g = got.data() + static_cast<std::size_t>(l) * stride;
    const double* w = want.data() + static_cast<std::size_t>(l) * stride;
    const std::string block = where + " block " + std::to_string(l);
    for (int f : {MoeTotals::micro_batches, MoeTotals::choices, MoeTotals::dropped})
      EXPECT_EQ(g[f], w[f]) << block << " field " << f;
    for (int e = 0; e < shape.moe.experts; ++e)
      EXPECT_EQ(g[MoeTotals::kFields + e], w[MoeTotals::kFields + e]) << block << " expert " << e;
    for (int f : {MoeTotals::aux, MoeTotals::z})
      EXPECT_NEAR(g[f], w[f], tolerance * std::abs(w[f])) << block << " field " << f;
  }
}

}  // namespace strata::cuda::testing
