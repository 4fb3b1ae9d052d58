// RMSNorm over the channel axis (Llama's normalisation; eps is the caller's, `model.norm_eps`):
//   out = inp · rstd · weight,  rstd = 1 / √(mean(inp²) + eps)   (no mean subtraction, no bias)
// rstd per row is kept for the backward pass, in T as LayerNorm keeps its statistics.
// The arithmetic on each element is model/kernels/rmsnorm.h, which the CUDA kernels share.
#pragma once

#include "model/kernels/cpu/precision.h"

namespace strata::cpu {

// inp, out (N, C); weight (C); rstd (N).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps);

// The residual add that closes a block's attention and the RMSNorm that opens its MLP, in one pass
// over each row:
//   sum_out = residual + (y + y_bias), rounded to `dtype` (residual + y when y_bias is null:
//   Llama's
//             blocks have no bias; the argument serves the GPT-2 bias path);
//   out = RMSNorm(sum_out; weight), rounded to `dtype`
// Exactly residual_bias_forward (residual.h), round_to_dtype, rmsnorm_forward, round_to_dtype.
// The arguments are the CUDA kernel's (model/kernels/cuda/rmsnorm.h), name for name. sum_out may
// alias residual.
template <class T>
void residual_rmsnorm_forward(T* sum_out, T* out, T* rstd, const T* residual, const T* y,
                              const T* y_bias, const T* weight, int N, int C, double eps,
                              ComputeDtype dtype);

// dinp (N, C) += ...; dweight (C) += ... (accumulated). inp is the RMSNorm's input (sum_out of the
// fused forward). Exactly rmsnorm_backward_input, then rmsnorm_backward_weight.
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C);

// The two halves of rmsnorm_backward, for the split backward (docs/ARCHITECTURE.md §5):
//   input:  dinp (N, C) += rstd · (g − inp · rstd² · mean(inp ⊙ g)), g = weight ⊙ dout
//   weight: dweight (C) += Σ_n dout · inp · rstd (needs no weight), rows summed in a fixed order
template <class T>
void rmsnorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight, const T* rstd,
                            int N, int C);
template <class T>
void rmsnorm_backward_weight(T* dweight, const T* dout, const T* inp, const T* rstd, int N, int C);

}  // namespace strata::cpu
