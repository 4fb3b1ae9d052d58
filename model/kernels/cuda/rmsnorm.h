// RMSNorm over channels (Llama's; eps the caller's; model/kernels/cpu/rmsnorm.h), fused with the
// residual add that precedes it in a pre-norm block:
//   sum_out (N, C) = residual + (y + y_bias)          the next residual stream, rounded to T
//                                                     (residual + y when y_bias is null)
//   out (N, C)     = sum_out · rstd · weight,  rstd = 1 / √(mean(sum_out²) + eps)
// rstd (N) is fp32 whatever T is, computed from the rounded sum_out the backward pass will see.
// One warp per row. The arithmetic on each element is model/kernels/rmsnorm.h, the CPU's too.
//
// Backward (the residual add's backward is the accumulation into dinp), g = weight ⊙ dout:
//   dinp (N, C)     += rstd · (g − inp · rstd² · mean(inp ⊙ g))
//   dweight (C, fp32) += Σ_n dout · inp · rstd
// dinp is one warp per row; dweight is a deterministic two-pass column sum (column_sums.cuh, no
// atomics). The two are separate kernels that share no intermediate: rmsnorm_backward_input and
// rmsnorm_backward_weight launch one each, for the split backward (docs/ARCHITECTURE.md §5), and
// rmsnorm_backward is exactly the two in order (bitwise the same results whichever way called).
//
// T: float, __nv_bfloat16, __half. Vectorised (16-byte accesses) when C is a multiple of 16 bytes
// of T and the pointers are 16-byte aligned, element by element otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/fp8_cast.h"

namespace strata::cuda {

// y == nullptr: plain RMSNorm of `residual` and sum_out is not written. y_bias may be null.
// rstd may be null (inference). sum_out may alias residual (in-place residual stream). eps is
// applied in fp32. `cast`: out's FP8 cast in the same pass (fp8_cast.h; none by default).
template <class T>
void residual_rmsnorm_forward(T* sum_out, T* out, float* rstd, const T* residual, const T* y,
                              const T* y_bias, const T* weight, int N, int C, double eps,
                              cudaStream_t stream, const Fp8CastOutput& cast = {});

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, double eps,
                     cudaStream_t stream, const Fp8CastOutput& cast = {}) {
  residual_rmsnorm_forward<T>(nullptr, out, rstd, inp, nullptr, nullptr, weight, N, C, eps, stream,
                              cast);
}

// inp is the RMSNorm input (sum_out of the forward). Scratch: ⌈N/256⌉·C floats of `arena`,
// released before returning. Exactly rmsnorm_backward_input, then rmsnorm_backward_weight.
template <class T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int N, int C, DeviceArena& arena, cudaStream_t stream);

// The input half, dinp (N, C) += ...: needs the weight, no scratch.
template <class T>
void rmsnorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight,
                            const float* rstd, int N, int C, cudaStream_t stream);

// The weight half, dweight (C, fp32) += ...: needs only dout, inp and rstd. Scratch as
// rmsnorm_backward's.
template <class T>
void rmsnorm_backward_weight(float* dweight, const T* dout, const T* inp, const float* rstd, int N,
                             int C, DeviceArena& arena, cudaStream_t stream);

}  // namespace strata::cuda
