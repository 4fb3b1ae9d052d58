// Deterministic column sums of an (N, C) matrix of computed values, for bias and LayerNorm
// parameter gradients (include from .cu files only):
//   out_k[c] += Σ_n value_k(n, c),  k < K
// Two passes, no atomics: (1) blocks of 32 columns × one chunk of kChunkRows rows each sum their
// chunk (8 row lanes per column, combined in lane order) into a (chunks, K, C) scratch buffer;
// (2) one thread per column adds the chunk partials in chunk order. The chunking depends only on
// N, so results are bitwise reproducible on any GPU.
//
// `F` is a functor `void operator()(int n, int c, float (&acc)[K]) const` adding value_k(n, c)
// into acc[k]; it reads its tensors itself, so the values are never stored.
#pragma once

#include <cuda_runtime.h>

#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/check.h"

namespace strata::cuda {

inline constexpr int kColumnTile = 32;  // columns per block: one warp reads 32 adjacent columns
inline constexpr int kRowLanes = 8;     // rows read concurrently per block (blockDim.y)
inline constexpr int kChunkRows = 256;  // rows per partial sum

template <int K>
struct ColumnOutputs {
  float* out[K];
};

template <int K, class F>
__global__ void __launch_bounds__(kColumnTile* kRowLanes)
    column_partial_sums_kernel(float* partial, F value, int N, int C) {
  __shared__ float lanes[K][kRowLanes][kColumnTile];
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  const int chunk = blockIdx.y;
  const int row_end = min(N, (chunk + 1) * kChunkRows);
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < C)
    for (int n = chunk * kChunkRows + threadIdx.y; n < row_end; n += kRowLanes) value(n, c, acc);
#pragma unroll
  for (int k = 0; k < K; ++k) lanes[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float sum = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) sum += lanes[k][lane][threadIdx.x];
    partial[(static_cast<long>(chunk) * K + k) * C + c] = sum;
  }
}

template <int K>
__global__ void column_finish_kernel(ColumnOutputs<K> outputs, const float* partial, int chunks,
                                     int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float sum = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk)
      sum += partial[(static_cast<long>(chunk) * K + k) * C + c];
    outputs.out[k][c] += sum;
  }
}

// Scratch: chunks·K·C floats from `arena`, released on return (same-stream reuse is safe).
template <int K, class F>
void launch_column_sums(ColumnOutputs<K> outputs, F value, int N, int C, DeviceArena& arena,
                        cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int chunks = (N + kChunkRows - 1) / kChunkRows;
  STRATA_CHECK(chunks <= 65535, "column sums over ", N, " rows: more chunks than the grid's 65535");
  ArenaScope scope(arena);
  float* partial = arena.allocate<float>(static_cast<std::size_t>(chunks) * K * C);
  const dim3 grid((C + kColumnTile - 1) / kColumnTile, chunks);
  column_partial_sums_kernel<K>
      <<<grid, dim3(kColumnTile, kRowLanes), 0, stream>>>(partial, value, N, C);
  STRATA_CUDA_CHECK_LAUNCH();
  column_finish_kernel<K><<<(C + 255) / 256, 256, 0, stream>>>(outputs, partial, chunks, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
