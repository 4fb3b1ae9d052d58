// SwiGLU, the Llama MLP's activation between the fused gate-up GEMM and the down GEMM
// (model/kernels/cpu/swiglu.h, the same signatures plus a stream):
//   out (N, F) = silu(g) ⊙ u,  silu(x) = x·σ(x)
//   dh (N, 2F) = [dout ⊙ u ⊙ silu'(g) | dout ⊙ silu(g)],  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
// Layout (the contract the fused gate-up weight follows, its gate rows first): each row of
// h (N, 2F) is [g | u], the gate g = h[:, 0:F] then the up projection u = h[:, F:2F]; dh has the
// same layout. The per-element arithmetic is model/kernels/swiglu.h, shared with the CPU
// reference, in fp32 whatever the storage dtype T (float, __nv_bfloat16, __half); each output is
// rounded to T once.
//
// Elementwise over the N·F pairs, grid-stride (elementwise.cuh's block size and grid): 8 pairs
// per thread with vector loads and stores when F is a multiple of 8 and the pointers are aligned
// for 8 elements, one pair per thread otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace strata::cuda {

// out (N, F) = silu(g) ⊙ u from h (N, 2F) = [g | u]. out must not overlap h.
template <class T>
void swiglu_forward(T* out, const T* h, int N, int F, cudaStream_t stream);

// dh (N, 2F) = [dg | du] (overwritten, not accumulated) from dout (N, F) and h (N, 2F). dh may
// alias h (each thread reads its pairs before writing them); not dout.
template <class T>
void swiglu_backward(T* dh, const T* dout, const T* h, int N, int F, cudaStream_t stream);

}  // namespace strata::cuda
