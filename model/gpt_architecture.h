// Which transformer block the model is (the `model.norm`, `model.mlp`, `model.position`,
// `model.kv_heads`, `model.bias`, `model.tie_embeddings` … keys, docs/ARCHITECTURE.md §3 and §5):
// GPT-2's 2019 block by default, or any mix of the pieces of the Llama family's (RMSNorm, a SwiGLU
// MLP, rotary positions, grouped-query attention, no biases, an untied head). The defaults are
// GPT-2 exactly, so a config without these keys, its checkpoints and its results are unchanged.
#pragma once

#include "model/core/choice.h"

namespace strata {

// The block's normalisation (both norms of every block and the final one).
enum class Norm { layernorm, rmsnorm };
inline constexpr Choices kNormChoices{
    std::array{ChoiceWord{Norm::layernorm, "layernorm"}, ChoiceWord{Norm::rmsnorm, "rmsnorm"}}};

// The MLP: C → d_ff → C with tanh-GELU, or SwiGLU's silu(x·W_gateᵀ) ⊙ (x·W_upᵀ) → C.
enum class MlpKind { gelu, swiglu };
inline constexpr Choices kMlpChoices{
    std::array{ChoiceWord{MlpKind::gelu, "gelu"}, ChoiceWord{MlpKind::swiglu, "swiglu"}}};

// Positions: a learned table added to the embedding (wpe), or rotary embeddings turning q and k.
enum class Position { learned, rope };
inline constexpr Choices kPositionChoices{
    std::array{ChoiceWord{Position::learned, "learned"}, ChoiceWord{Position::rope, "rope"}}};

struct GptArchitecture {
  Norm norm = Norm::layernorm;
  double norm_eps = 1e-5;  // the norms' ε, which the kernels add as a float (GPT-2's 1e-5f)
  MlpKind mlp = MlpKind::gelu;
  int d_ff = 0;               // the MLP's hidden width; 0: the family's (GptShape::ffn_width)
  int ffn_multiple_of = 256;  // SwiGLU's default width rounds up to a multiple of this (Llama's)
  Position position = Position::learned;
  double rope_theta = 10000.0;  // RoPE's base (Llama 3: 500000)
  int kv_heads = 0;             // key/value heads; 0: n_head (multi-head), 1: multi-query
  bool bias = true;             // biases on every linear layer and LayerNorm
  bool tie_embeddings = true;   // the LM head is wte (GPT-2) or its own lm_head.weight

  bool operator==(const GptArchitecture&) const = default;
};

}  // namespace strata
