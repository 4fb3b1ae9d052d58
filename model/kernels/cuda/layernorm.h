// LayerNorm over channels (eps the caller's, model.norm_eps, applied in fp32; biased variance;
// model/kernels/cpu/layernorm.h), fused with the residual add that precedes it in a pre-LN block:
//   sum_out (N, C) = residual + (y + y_bias)          the next residual stream, rounded to T
//                                                     (residual + y when y_bias is null)
//   out (N, C)     = (sum_out − mean)·rstd·weight + bias,  rstd = 1 / √(var + eps)
//                                                     (no + bias when bias is null)
// Statistics are fp32 (mean, rstd (N)) whatever T is, computed from the rounded sum_out the
// backward pass will see. One warp per row; two-pass variance (no E[x²] − E[x]² cancellation).
//
// Backward (the residual add's backward is the accumulation into dinp):
//   dinp (N, C) += (dnorm − mean(dnorm) − norm·mean(dnorm·norm))·rstd, dnorm = weight·dout
//   dweight, dbias (C, fp32) += Σ_n norm·dout, Σ_n dout      (dbias null: dweight alone)
// dinp is one warp per row; the parameter gradients are deterministic two-pass column sums (no
// atomics) that recompute norm from inp, mean and rstd. The two are separate kernels that share
// no intermediate: layernorm_backward_input and layernorm_backward_weight launch one each, for the
// split backward (docs/ARCHITECTURE.md §5), and layernorm_backward is exactly the two in order
// (bitwise the same results whichever way they are called).
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

// y == nullptr: plain LayerNorm of `residual` and sum_out is not written. y_bias and bias may be
// null (no bias). mean, rstd may be null (inference). sum_out may alias residual (in-place
// residual stream). `cast`: out's FP8 cast in the same pass (fp8_cast.h; none by default).
template <class T>
void residual_layernorm_forward(T* sum_out, T* out, float* mean, float* rstd, const T* residual,
                                const T* y, const T* y_bias, const T* weight, const T* bias, int N,
                                int C, double eps, cudaStream_t stream,
                                const Fp8CastOutput& cast = {});

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int N, int C, double eps, cudaStream_t stream,
                       const Fp8CastOutput& cast = {}) {
  residual_layernorm_forward<T>(nullptr, out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C,
                                eps, stream, cast);
}

// inp is the LayerNorm input (sum_out of the forward). Scratch: ⌈N/256⌉·2C floats of `arena`
// (⌈N/256⌉·C when dbias is null), released before returning. Exactly layernorm_backward_input,
// then layernorm_backward_weight.
template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C,
                        DeviceArena& arena, cudaStream_t stream);

// The input half, dinp (N, C) += ...: needs the weight, no scratch.
template <class T>
void layernorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight,
                              const float* mean, const float* rstd, int N, int C,
                              cudaStream_t stream);

// The weight half, dweight, dbias (C, fp32) += ...: needs only dout, inp and its statistics.
// dbias null: dweight alone, bitwise as with dbias. Scratch as layernorm_backward's.
template <class T>
void layernorm_backward_weight(float* dweight, float* dbias, const T* dout, const T* inp,
                               const float* mean, const float* rstd, int N, int C,
                               DeviceArena& arena, cudaStream_t stream);

}  // namespace strata::cuda
