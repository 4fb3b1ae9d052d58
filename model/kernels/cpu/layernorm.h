// LayerNorm over the channel axis (eps the caller's, `model.norm_eps`, GPT-2's 1e-5 by default;
// docs/ARCHITECTURE.md §5):
//   out = (inp - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps), var biased (÷C).
// bias may be null: out = (inp - mean) * rstd * weight (`model.bias: false`).
// mean and rstd per row are kept for the backward pass.
#pragma once

#include "model/kernels/cpu/precision.h"

namespace strata::cpu {

// inp, out (N, C); weight, bias (C; bias may be null); mean, rstd (N). eps (model.norm_eps) is
// added as T: GPT-2's 1e-5 is the float 1e-5f it always was, and exactly 1e-5 in double.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, double eps);

// The residual add that closes an attention block and the LayerNorm that opens the MLP, in one
// pass over each row (the row is still in cache when the LayerNorm reads it):
//   sum_out = residual + (y + y_bias), rounded to `dtype` (residual + y when y_bias is null);
//   out = LayerNorm(sum_out; weight, bias), rounded to `dtype` (bias may be null)
// Exactly residual_bias_forward (residual.h), round_to_dtype, layernorm_forward, round_to_dtype.
// The arguments are the CUDA kernel's (model/kernels/cuda/layernorm.h), name for name.
template <class T>
void residual_layernorm_forward(T* sum_out, T* out, T* mean, T* rstd, const T* residual, const T* y,
                                const T* y_bias, const T* weight, const T* bias, int N, int C,
                                double eps, ComputeDtype dtype);

// dinp (N, C) += ...; dweight, dbias (C) += ... (accumulated; dbias null: no bias gradient).
// Exactly layernorm_backward_input, then layernorm_backward_weight.
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

// The two halves of layernorm_backward, for the split backward (docs/ARCHITECTURE.md §5): the
// input gradient dinp (N, C) += ... needs the weight; the weight gradient dweight, dbias (C) += ...
// needs only the input's statistics and dout. dbias may be null (a LayerNorm without a bias):
// then only dweight is summed, bitwise as it is with a bias.
template <class T>
void layernorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight, const T* mean,
                              const T* rstd, int N, int C);
template <class T>
void layernorm_backward_weight(T* dweight, T* dbias, const T* dout, const T* inp, const T* mean,
                               const T* rstd, int N, int C);

}  // namespace strata::cpu
