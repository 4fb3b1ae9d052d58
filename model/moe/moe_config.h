// What a mixture-of-experts model is (the `model.moe` keys, docs/ARCHITECTURE.md §5 "Mixture of
// experts"): every `every`-th block's MLP becomes `experts` expert MLPs (each the model's own MLP,
// MoeExpertShape: GELU of width F, or SwiGLU) and a linear softmax router; each token goes to its
// `top_k` experts, weighted by their gates (model/kernels/moe_routing.h). `capacity_factor` > 0
// caps the tokens an expert takes in each group of `group_sequences` whole sequences at
// ceil(capacity_factor · top_k · group tokens / experts); 0 is dropless. `aux_loss` weighs the
// Switch load-balancing loss and `z_loss` the router z-loss, both added to the training loss.
#pragma once

#include <cmath>
#include <cstdint>

namespace strata {

// The experts' MLP, the model's own (model.mlp, model.d_ff, model.bias; GptShape::expert_shape):
// C → F → C with tanh-GELU, or SwiGLU's fused gate and up projections (2F, C), silu(gate)·up, then
// F → C; a bias on both products, or none.
struct MoeExpertShape {
  int d_model = 0;
  int ffn_width = 0;  // F, all of it (a tensor-parallel rank holds F / tp hidden columns)
  bool swiglu = false;
  bool bias = true;

  // GPT-2's MLP: GELU of width 4C, with biases.
  static MoeExpertShape gpt2(int d_model) { return {d_model, 4 * d_model, false, true}; }
  // Rows of the fc product: F, or the gate and up projections' 2F.
  int fc_width() const { return swiglu ? 2 * ffn_width : ffn_width; }
  bool operator==(const MoeExpertShape&) const = default;
};

struct MoeConfig {
  int experts = 0;  // 0: no mixture of experts (every MLP dense)
  int top_k = 2;
  int every = 1;  // block i has experts when i % every == every − 1
  double capacity_factor = 1.25;
  int group_sequences = 1;
  double aux_loss = 0.01;
  double z_loss = 0.001;

  bool enabled() const { return experts > 0; }
  bool is_moe_block(int layer) const { return enabled() && layer % every == every - 1; }
  // Assignments one expert takes from a group of `group_tokens` tokens; -1: unlimited.
  std::int64_t capacity(std::int64_t group_tokens) const {
    if (capacity_factor <= 0) return -1;
    return static_cast<std::int64_t>(
        std::ceil(capacity_factor * top_k * static_cast<double>(group_tokens) / experts));
  }
  bool operator==(const MoeConfig&) const = default;
};

}  // namespace strata
