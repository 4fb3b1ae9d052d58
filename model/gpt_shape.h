// The shape of a GPT-2 model (docs/ARCHITECTURE.md §5) and the derived sizes every module agrees
// on.
#pragma once

#include <cstdint>

namespace strata {

struct GptShape {
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int seq_len = 0;     // maximum context (rows of wpe)
  int vocab_size = 0;  // real tokens

  // Vocabulary rows padded to a multiple of 128: GEMM-friendly and divisible by any power-of-two
  // tensor-parallel degree up to 128. Rows past vocab_size are never targets and stay zero.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return d_model / n_head; }
  // Parameters excluding position embeddings (N of the MFU formula, ARCHITECTURE §5).
  std::int64_t params_excluding_positions() const;
  // Model FLOPs per token for MFU: 6·N + 12·L·C·T.
  double flops_per_token() const;
};

}  // namespace strata
