// SwiGLU, the Llama MLP's activation between the fused gate-up GEMM and the down GEMM:
//   out = silu(g) ⊙ u,  silu(x) = x·σ(x)
// Layout (the contract the fused gate-up weight follows, its gate rows first): each row of
// h (N, 2F) is [g | u], the gate g = h[:, 0:F] then the up projection u = h[:, F:2F];
// out (N, F).
// The per-element arithmetic is model/kernels/swiglu.h, shared with the CUDA kernels
// (model/kernels/cuda/swiglu.h). Nothing here rounds to the compute dtype: as for gelu_forward,
// the caller rounds the outputs it stores (round_to_dtype, precision.h).
#pragma once

namespace strata::cpu {

// out (N, F) = silu(g) ⊙ u, from h (N, 2F) = [g | u] per row. out must not overlap h.
template <class T>
void swiglu_forward(T* out, const T* h, int N, int F);

// dh (N, 2F) = [dg | du] per row (overwritten, not accumulated), the layout of h:
//   dg = dout ⊙ u ⊙ silu'(g),  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
//   du = dout ⊙ silu(g)
// dout (N, F). dh may alias h (each pair is read before it is written); not dout.
template <class T>
void swiglu_backward(T* dh, const T* dout, const T* h, int N, int F);

}  // namespace strata::cpu
