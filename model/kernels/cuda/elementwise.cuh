// Elementwise maps over flat arrays, shared by the casts and GELU (include from .cu files only).
// `op` is a functor computing in float; inputs are converted to float and the result rounded to
// the output dtype. Each thread handles 8 consecutive elements with vector loads when every
// pointer is aligned for it, and the tail past the last full vector element by element.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"

namespace strata::cuda {

inline constexpr int kMapVector = 8;
inline constexpr int kMapThreads = 256;

template <int kN, class Out, class In, class Op>
__global__ void __launch_bounds__(kMapThreads)
    unary_map_kernel(Out* out, const In* in, long n, Op op) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  const long first = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long vectors = n / kN;
  for (long i = first; i < vectors; i += stride) {
    const Vec<In, kN> x = load_vec<kN>(in + i * kN);
    Vec<Out, kN> y;
#pragma unroll
    for (int k = 0; k < kN; ++k) y.v[k] = from_float<Out>(op(to_float(x.v[k])));
    store_vec(out + i * kN, y);
  }
  for (long i = vectors * kN + first; i < n; i += stride)
    out[i] = from_float<Out>(op(to_float(in[i])));
}

template <int kN, class Out, class In1, class In2, class Op>
__global__ void __launch_bounds__(kMapThreads)
    binary_map_kernel(Out* out, const In1* in1, const In2* in2, long n, Op op) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  const long first = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long vectors = n / kN;
  for (long i = first; i < vectors; i += stride) {
    const Vec<In1, kN> a = load_vec<kN>(in1 + i * kN);
    const Vec<In2, kN> b = load_vec<kN>(in2 + i * kN);
    Vec<Out, kN> y;
#pragma unroll
    for (int k = 0; k < kN; ++k) y.v[k] = from_float<Out>(op(to_float(a.v[k]), to_float(b.v[k])));
    store_vec(out + i * kN, y);
  }
  for (long i = vectors * kN + first; i < n; i += stride)
    out[i] = from_float<Out>(op(to_float(in1[i]), to_float(in2[i])));
}

// Enough blocks to fill an H100 many times over (132 SMs × 2048 threads / 256 = 1056 blocks per
// wave); beyond that the grid-stride loops take over.
inline unsigned map_blocks(long work_items) {
  const long blocks = (work_items + kMapThreads - 1) / kMapThreads;
  return static_cast<unsigned>(std::clamp(blocks, 1L, 16L * 1056L));
}

template <class Out, class In, class Op>
void launch_unary_map(Out* out, const In* in, long n, Op op, cudaStream_t stream) {
  if (n <= 0) return;
  if (is_aligned(out, sizeof(Vec<Out, kMapVector>)) &&
      is_aligned(in, sizeof(Vec<In, kMapVector>))) {
    unary_map_kernel<kMapVector>
        <<<map_blocks(n / kMapVector + 1), kMapThreads, 0, stream>>>(out, in, n, op);
  } else {
    unary_map_kernel<1><<<map_blocks(n), kMapThreads, 0, stream>>>(out, in, n, op);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class Out, class In1, class In2, class Op>
void launch_binary_map(Out* out, const In1* in1, const In2* in2, long n, Op op,
                       cudaStream_t stream) {
  if (n <= 0) return;
  if (is_aligned(out, sizeof(Vec<Out, kMapVector>)) &&
      is_aligned(in1, sizeof(Vec<In1, kMapVector>)) &&
      is_aligned(in2, sizeof(Vec<In2, kMapVector>))) {
    binary_map_kernel<kMapVector>
        <<<map_blocks(n / kMapVector + 1), kMapThreads, 0, stream>>>(out, in1, in2, n, op);
  } else {
    binary_map_kernel<1><<<map_blocks(n), kMapThreads, 0, stream>>>(out, in1, in2, n, op);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
