// Warp and block reductions (sum, max, or any associative operator) with a fixed combination order
// (shuffle butterflies, then the warp partials combined in warp order), so results are bitwise
// reproducible run to run. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace strata::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

struct SumOp {
  template <class V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// `op` over groups of `kWidth` consecutive lanes (a power of two up to 32); every lane of the
// group gets the result. All 32 lanes of the warp must call it.
template <int kWidth = 32, class V, class Op>
__device__ __forceinline__ V group_reduce(V x, Op op) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2)
    x = op(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

template <int kWidth = 32, class V>
__device__ __forceinline__ V group_sum(V x) {
  return group_reduce<kWidth>(x, SumOp{});
}

template <int kWidth = 32>
__device__ __forceinline__ float group_max(float x) {
  return group_reduce<kWidth>(x, MaxOp{});
}

// `op` over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `identity` pads the missing warps; `shared` holds 32 values; the leading barrier lets
// calls follow each other.
template <class V, class Op>
__device__ V block_reduce(V x, V* shared, V identity, Op op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = group_reduce(x, op);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  const V total = lane < warps ? shared[lane] : identity;
  return group_reduce(total, op);
}

template <class V>
__device__ V block_sum(V x, V* shared) {
  return block_reduce(x, shared, V(0), SumOp{});
}

__device__ inline float block_max(float x, float* shared) {
  return block_reduce(x, shared, -INFINITY, MaxOp{});
}

}  // namespace strata::cuda
