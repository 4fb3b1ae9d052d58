// The residual add that closes a row-parallel linear layer and the bias gradient of such a layer
// (model/kernels/cpu/residual.h). Where a LayerNorm follows the add, layernorm.h fuses both.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "model/kernels/cuda/arena.h"

namespace strata::cuda {

// out (N, C) = x + (y + bias), in fp32, rounded once. bias (C) may be null. out may alias x or y.
// T: float, __nv_bfloat16, __half.
template <class T>
void residual_bias_forward(T* out, const T* x, const T* y, const T* bias, int N, int C,
                           cudaStream_t stream);

// dbias (C, fp32) += Σ_n dout[n, :]. Deterministic (fixed-order two-pass column sums, no atomics);
// scratch of ⌈N/256⌉·C floats comes from `arena` and is released before returning.
template <class T>
void bias_backward(float* dbias, const T* dout, int N, int C, DeviceArena& arena,
                   cudaStream_t stream);

}  // namespace strata::cuda
