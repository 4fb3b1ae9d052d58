// LayerNorm over the channel axis (eps 1e-5, DESIGN §5):
//   out = (inp - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps), var biased (÷C).
// mean and rstd per row are kept for the backward pass.
#pragma once

namespace strata::cpu {

inline constexpr double kLayerNormEps = 1e-5;

// inp, out (N, C); mean, rstd (N).
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C);

// dinp (N, C) += ...; dweight, dbias (C) += ... (accumulated).
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

}  // namespace strata::cpu
