// LayerNorm over the channel axis (eps 1e-5, docs/ARCHITECTURE.md §5):
//   out = (inp - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps), var biased (÷C).
// mean and rstd per row are kept for the backward pass.
#pragma once

#include "model/kernels/cpu/precision.h"

namespace strata::cpu {

inline constexpr double kLayerNormEps = 1e-5;

// inp, out (N, C); mean, rstd (N).
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C);

// The residual add that closes an attention block and the LayerNorm that opens the MLP, in one
// pass over each row (the row is still in cache when the LayerNorm reads it):
//   sum_out = residual + (y + y_bias), rounded to `dtype`;
//   out = LayerNorm(sum_out; weight, bias), rounded to `dtype`
// Exactly residual_bias_forward (residual.h), round_to_dtype, layernorm_forward, round_to_dtype.
// The arguments are the CUDA kernel's (model/kernels/cuda/layernorm.h), name for name.
template <class T>
void residual_layernorm_forward(T* sum_out, T* out, T* mean, T* rstd, const T* residual, const T* y,
                                const T* y_bias, const T* weight, const T* bias, int N, int C,
                                ComputeDtype dtype);

// dinp (N, C) += ...; dweight, dbias (C) += ... (accumulated).
// Exactly layernorm_backward_input, then layernorm_backward_weight.
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

// The two halves of layernorm_backward, for the split backward (docs/ARCHITECTURE.md §5): the
// input gradient dinp (N, C) += ... needs the weight; the weight gradient dweight, dbias (C) += ...
// needs only the input's statistics and dout.
template <class T>
void layernorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight, const T* mean,
                              const T* rstd, int N, int C);
template <class T>
void layernorm_backward_weight(T* dweight, T* dbias, const T* dout, const T* inp, const T* mean,
                               const T* rstd, int N, int C);

}  // namespace strata::cpu
