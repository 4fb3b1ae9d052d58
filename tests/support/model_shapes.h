// Model shapes the model tests share: the Llama family's block on a test's own sizes.
#pragma once

#include "model/gpt_shape.h"

namespace strata::testing {

// RMSNorm, a SwiGLU MLP of width d_ff, rotary positions (a small θ turns fast enough over a few
// positions to matter), `kv_heads` key/value heads, no biases, an untied head
// (model/gpt_architecture.h).
inline GptArchitecture llama_architecture(int d_ff, int kv_heads, double rope_theta = 100.0) {
  GptArchitecture arch;
  arch.norm = Norm::rmsnorm;
  arch.mlp = MlpKind::swiglu;
  arch.d_ff = d_ff;
  arch.position = Position::rope;
  arch.rope_theta = rope_theta;
  arch.kv_heads = kv_heads;
  arch.bias = false;
  arch.tie_embeddings = false;
  return arch;
}

// `base`'s sizes and experts (base.moe: its MoE blocks' experts are then SwiGLU MLPs of width
// d_ff without biases) with that block.
inline GptShape llama_shape(const GptShape& base, int d_ff, int kv_heads,
                            double rope_theta = 100.0) {
  return GptShape(base.n_layer, base.n_head, base.d_model, base.seq_len, base.vocab_size, base.moe,
                  llama_architecture(d_ff, kv_heads, rope_theta));
}

}  // namespace strata::testing
