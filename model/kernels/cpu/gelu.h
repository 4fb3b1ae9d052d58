// GELU, tanh approximation (GPT-2, docs/ARCHITECTURE.md §5):
//   gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
#pragma once

#include "model/kernels/cpu/precision.h"

namespace strata::cpu {

template <class T>
void gelu_forward(T* out, const T* inp, long n);

// The bias of the GEMM before the GELU and the GELU, in one pass over each row of that GEMM's
// output (N, H), which holds the product without its bias:
//   pre += bias (none if null), rounded to `dtype`;  out = gelu(pre), rounded to `dtype`
// pre is the MLP's fch activation, out its fch_gelu. Saves the GEMM reading a bias-filled output
// (matmul_forward) and a separate GELU pass; the values are those of matmul_forward with the bias,
// round_to_dtype, gelu_forward, round_to_dtype, up to where the bias enters the sum (a GEMM library
// may add it before the last block of the product rather than after all of it).
template <class T>
void bias_gelu_forward(T* out, T* pre, const T* bias, int N, int H, ComputeDtype dtype);

// dinp = gelu'(inp) · dout (overwritten).
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n);

}  // namespace strata::cpu
