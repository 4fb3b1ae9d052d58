// GELU, tanh approximation (GPT-2, docs/ARCHITECTURE.md §5), standalone; the MLP normally fuses it
// into the fc GEMM's epilogue (matmul.h) and uses these only when cuBLASLt offers no fused
// algorithm.
//   gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
// Same math as model/kernels/cpu/gelu.h: 0.5·(1 + tanh u) = σ(2u), computed as 1 / (1 + e^(−2u))
// in fp32 whatever the storage dtype. Elementwise, so in-place calls are fine.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "model/kernels/cuda/fp8_cast.h"

namespace strata::cuda {

// out (n) = gelu(inp (n)).  T: float, __nv_bfloat16, __half.
template <class T>
void gelu_forward(T* out, const T* inp, long n, cudaStream_t stream);

// gelu_forward, and in the same pass `cast` of its output (fp8_cast.h Fp8CastOutput: the
// delayed recipe's cast of mlp_proj's input; docs/ARCHITECTURE.md §6 "FP8").
template <class T>
void gelu_forward_fp8(T* out, const T* inp, long n, const Fp8CastOutput& cast, cudaStream_t stream);

// dinp (n) = gelu'(inp) · dout (overwritten; may alias dout).
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n, cudaStream_t stream);

}  // namespace strata::cuda
