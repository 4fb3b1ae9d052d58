// The shape of a GPT model (docs/ARCHITECTURE.md §5): its sizes, its block's architecture (GPT-2's
// by default, model/gpt_architecture.h) and the derived sizes every module agrees on.
#pragma once

#include <cstdint>

#include "model/gpt_architecture.h"
#include "model/moe/moe_config.h"

namespace strata {

struct GptShape {
  GptShape() = default;
  GptShape(int layers, int heads, int width, int context, int vocabulary,
           const MoeConfig& experts = {}, const GptArchitecture& architecture = {})
      : n_layer(layers),
        n_head(heads),
        d_model(width),
        seq_len(context),
        vocab_size(vocabulary),
        moe(experts),
        arch(architecture) {}

  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int seq_len = 0;     // maximum context (rows of wpe)
  int vocab_size = 0;  // real tokens
  MoeConfig moe;       // experts 0: every MLP dense
  GptArchitecture arch;

  // Vocabulary rows padded to a multiple of 128: GEMM-friendly and divisible by any power-of-two
  // tensor-parallel degree up to 128. Rows past vocab_size are never targets and stay zero.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return d_model / n_head; }
  // Key/value heads (model.kv_heads, 0 meaning n_head); fewer than n_head is grouped-query
  // attention, whose q, k and v are separate tensors (ARCHITECTURE §5).
  int kv_head_count() const { return arch.kv_heads == 0 ? n_head : arch.kv_heads; }
  bool grouped_query() const { return kv_head_count() != n_head; }
  // Rows of the fused q, k, v product: n_head q heads, then kv_heads k and kv_heads v heads.
  int qkv_width() const { return (n_head + 2 * kv_head_count()) * head_size(); }
  // The MLP's hidden width F: model.d_ff, else 4C for GELU and, for SwiGLU, Llama's 2/3 of 4C
  // (⌊8C/3⌋) rounded up to a multiple of model.ffn_multiple_of.
  int ffn_width() const;
  // Rows of the MLP's first product: F, or the fused gate and up projections' 2F.
  int fc_width() const { return arch.mlp == MlpKind::swiglu ? 2 * ffn_width() : ffn_width(); }
  // The MLP every expert of an MoE block is (model/moe/moe_config.h).
  MoeExpertShape expert_shape() const {
    return {d_model, ffn_width(), arch.mlp == MlpKind::swiglu, arch.bias};
  }
  // Parameters excluding position embeddings; with experts, all of them.
  std::int64_t params_excluding_positions() const;
  // Of those, the ones a token's forward pass uses (N of the MFU formula, ARCHITECTURE §5): with
  // experts, the router and top_k experts' MLPs of each MoE block; all of them otherwise.
  std::int64_t active_params_excluding_positions() const;
  // Model FLOPs per token for MFU: 6·N_active + 12·L·C·T, N_active without an untied wte (a
  // lookup, no product; tied, wte is the head's matrix and counts once).
  double flops_per_token() const;
};

}  // namespace strata
