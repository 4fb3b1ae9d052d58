// The FP8 casts (fp8_cast.h). The amax of the tensor: a grid-stride max per thread, a warp and a
// block reduction, one atomicMax per block on the float's bits (non-negative floats, +infinity
// included, order as their bits do as unsigned integers). Per row: one warp per row. Per column:
// one thread per column walking the rows (adjacent threads read adjacent columns). The casts map
// each element; the transposed one goes through a 32 × 33 shared-memory tile so that both the
// reads and the writes are coalesced.
#include "model/kernels/cuda/fp8_cast.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;

__device__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <class T>
__global__ void __launch_bounds__(kThreads) tensor_amax_kernel(unsigned* amax, const T* x, long n) {
  __shared__ float warps[kThreads / 32];
  float m = 0.0f;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x)
    m = fp8_amax_step(m, to_float(x[i]));
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = warp_max(threadIdx.x < kThreads / 32 ? warps[threadIdx.x] : 0.0f);
    if (threadIdx.x == 0) atomicMax(amax, __float_as_uint(m));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    row_amax_kernel(float* amax, const T* x, int rows, int cols) {
  const int row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float m = 0.0f;
  for (int c = threadIdx.x % 32; c < cols; c += 32)
    m = fp8_amax_step(m, to_float(x[static_cast<long>(row) * cols + c]));
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) amax[row] = m;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    column_amax_kernel(float* amax, const T* x, int rows, int cols) {
  const int col = blockIdx.x * kThreads + threadIdx.x;
  if (col >= cols) return;
  float m = 0.0f;
  for (int r = 0; r < rows; ++r)
    m = fp8_amax_step(m, to_float(x[static_cast<long>(r) * cols + col]));
  amax[col] = m;
}

__global__ void scales_kernel(float* scale, float* inverse, const float* amax, int count,
                              Fp8Format format) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float s = fp8_scale(amax[i], format);
  scale[i] = s;
  inverse[i] = 1.0f / s;
}

__global__ void scale_of_kernel(float* scale, float* inverse, float amax, Fp8Format format) {
  const float s = fp8_scale(amax, format);
  *scale = s;
  *inverse = 1.0f / s;
}

__global__ void keep_largest_kernel(float* kept, const float* amax) { *kept = fmaxf(*kept, *amax); }

__device__ float scale_of(const float* scale, Fp8Axis axis, long row, long col) {
  return scale[axis == Fp8Axis::tensor ? 0 : axis == Fp8Axis::rows ? row : col];
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(std::uint8_t* codes, const T* x, const float* scale, int rows, int cols,
                Fp8Axis axis, Fp8Format format) {
  const long n = static_cast<long>(rows) * cols;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x)
    codes[i] = fp8_quantize(
        to_float(x[i]),
        axis == Fp8Axis::tensor ? scale[0] : scale_of(scale, axis, i / cols, i % cols), format);
}

// One 32 × 32 tile per block of 32 × 8 threads (blockIdx.x its rows, blockIdx.y its columns): read
// x's tile row by row, write its transpose.
template <class T>
__global__ void cast_transpose_kernel(std::uint8_t* codes, const T* x, const float* scale, int rows,
                                      int cols, Fp8Axis axis, Fp8Format format) {
  __shared__ std::uint8_t tile[kTile][kTile + 1];
  const int r0 = blockIdx.x * kTile, c0 = blockIdx.y * kTile;  // rows on x: up to 2^31 − 1 tiles
  for (int dr = threadIdx.y; dr < kTile; dr += blockDim.y) {
    const int r = r0 + dr, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      tile[dr][threadIdx.x] = fp8_quantize(to_float(x[static_cast<long>(r) * cols + c]),
                                           scale_of(scale, axis, r, c), format);
  }
  __syncthreads();
  for (int dc = threadIdx.y; dc < kTile; dc += blockDim.y) {
    const int c = c0 + dc, r = r0 + threadIdx.x;
    if (r < rows && c < cols) codes[static_cast<long>(c) * rows + r] = tile[threadIdx.x][dc];
  }
}

unsigned blocks_for(long work) {
  const long blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

}  // namespace

template <class T>
void fp8_amaxes(float* amax, const T* x, int rows, int cols, Fp8Axis axis, cudaStream_t stream) {
  STRATA_CHECK(rows >= 0 && cols >= 0);
  const long n = static_cast<long>(rows) * cols;
  switch (axis) {
    case Fp8Axis::tensor:
      STRATA_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
      if (n == 0) return;
      tensor_amax_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<unsigned*>(amax),
                                                                 x, n);
      break;
    case Fp8Axis::rows:
      if (rows == 0) return;
      row_amax_kernel<<<(rows + kThreads / 32 - 1) / (kThreads / 32), kThreads, 0, stream>>>(
          amax, x, rows, cols);
      break;
    case Fp8Axis::columns:
      if (cols == 0) return;
      column_amax_kernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, stream>>>(amax, x, rows,
                                                                                    cols);
      break;
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

void fp8_scale_of(float* scale, float* inverse, float amax, Fp8Format format, cudaStream_t stream) {
  scale_of_kernel<<<1, 1, 0, stream>>>(scale, inverse, amax, format);
  STRATA_CUDA_CHECK_LAUNCH();
}

void fp8_keep_largest(float* kept, const float* amax, cudaStream_t stream) {
  keep_largest_kernel<<<1, 1, 0, stream>>>(kept, amax);
  STRATA_CUDA_CHECK_LAUNCH();
}

void fp8_scales(float* scale, float* inverse, const float* amax, int count, Fp8Format format,
                cudaStream_t stream) {
  if (count <= 0) return;
  scales_kernel<<<(count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(scale, inverse, amax,
                                                                            count, format);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void fp8_cast(std::uint8_t* codes, const T* x, const float* scale, int rows, int cols, Fp8Axis axis,
              bool transpose, Fp8Format format, cudaStream_t stream) {
  STRATA_CHECK(rows >= 0 && cols >= 0);
  const long n = static_cast<long>(rows) * cols;
  if (n == 0) return;
  if (!transpose) {
    cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(codes, x, scale, rows, cols, axis, format);
  } else {
    STRATA_CHECK((cols + kTile - 1) / kTile <= 65535, "a transposed FP8 cast of ", cols,
                 " columns (at most 65535 tiles of 32)");
    const dim3 grid((rows + kTile - 1) / kTile, (cols + kTile - 1) / kTile);
    cast_transpose_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(codes, x, scale, rows, cols, axis,
                                                               format);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

#define STRATA_INSTANTIATE(T)                                                               \
  template void fp8_amaxes<T>(float*, const T*, int, int, Fp8Axis, cudaStream_t);           \
  template void fp8_cast<T>(std::uint8_t*, const T*, const float*, int, int, Fp8Axis, bool, \
                            Fp8Format, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
