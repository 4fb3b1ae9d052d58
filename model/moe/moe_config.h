// What a mixture-of-experts model is (the `model.moe` keys, docs/ARCHITECTURE.md §5 "Mixture of
// experts"): every `every`-th block's MLP becomes `experts` expert MLPs (each the shape of the
// dense one: C → 4C → C with GELU) and a linear softmax router; each token goes to its `top_k`
// experts, weighted by their gates (model/kernels/moe_routing.h). `capacity_factor` > 0 caps the
// tokens an expert takes in each group of `group_sequences` whole sequences at
// ceil(capacity_factor · top_k · group tokens / experts); 0 is dropless. `aux_loss` weighs the
// Switch load-balancing loss and `z_loss` the router z-loss, both added to the training loss.
#pragma once

#include <cmath>
#include <cstdint>

namespace strata {

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
