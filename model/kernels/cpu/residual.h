// The residual add that closes a row-parallel linear layer: its bias is added once, after the
// partial outputs of the tensor-parallel ranks have been summed.
#pragma once

namespace strata::cpu {

// out (N, C) = x + (y + bias); bias may be null (out = x + y). out may alias x.
template <class T>
void residual_bias_forward(T* out, const T* x, const T* y, const T* bias, int N, int C);

// dbias (C) += Σ_n dout[n, :] (accumulated; rows summed in order, so reproducible).
template <class T>
void bias_backward(T* dbias, const T* dout, int N, int C);

}  // namespace strata::cpu
