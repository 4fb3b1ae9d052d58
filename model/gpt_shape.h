// The shape of a GPT-2 model (docs/ARCHITECTURE.md §5) and the derived sizes every module agrees
// on.
#pragma once

#include <cstdint>

#include "model/moe/moe_config.h"

namespace strata {

struct GptShape {
  GptShape() = default;
  GptShape(int layers, int heads, int width, int context, int vocabulary,
           const MoeConfig& experts = {})
      : n_layer(layers),
        n_head(heads),
        d_model(width),
        seq_len(context),
        vocab_size(vocabulary),
        moe(experts) {}

  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int seq_len = 0;     // maximum context (rows of wpe)
  int vocab_size = 0;  // real tokens
  MoeConfig moe;       // experts 0: every MLP dense

  // Vocabulary rows padded to a multiple of 128: GEMM-friendly and divisible by any power-of-two
  // tensor-parallel degree up to 128. Rows past vocab_size are never targets and stay zero.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return d_model / n_head; }
  // Parameters excluding position embeddings; with experts, all of them.
  std::int64_t params_excluding_positions() const;
  // Of those, the ones a token's forward pass uses (N of the MFU formula, ARCHITECTURE §5): with
  // experts, the router and top_k experts' MLPs of each MoE block; all of them otherwise.
  std::int64_t active_params_excluding_positions() const;
  // Model FLOPs per token for MFU: 6·N_active + 12·L·C·T.
  double flops_per_token() const;
};

}  // namespace strata
