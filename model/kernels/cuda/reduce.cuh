// Warp and block reductions with a fixed combination order (shuffle butterflies, then warp
// partials summed by warp 0 in warp order), so results are bitwise reproducible run to run.
// Include from .cu files only.
//
// Status: compiled for sm_90a, never run on a GPU (untested).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace strata::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

// Sum / max over groups of `kWidth` consecutive lanes (a power of two up to 32); every lane of
// the group gets the result. All 32 lanes of the warp must call it.
template <int kWidth = 32, class V>
__device__ __forceinline__ V group_sum(V x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

template <int kWidth = 32>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `shared` holds 32 values; the leading barrier lets calls follow each other.
template <class V>
__device__ V block_sum(V x, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = group_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  V total = lane < warps ? shared[lane] : V(0);
  total = group_sum(total);
  return total;
}

__device__ inline float block_max(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = group_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float total = lane < warps ? shared[lane] : -INFINITY;
  return group_max(total);
}

}  // namespace strata::cuda
