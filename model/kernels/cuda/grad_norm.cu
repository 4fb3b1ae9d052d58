#include "model/kernels/cuda/grad_norm.h"

#include <algorithm>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/reduce.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxPartials = 1024;         // blocks of the first pass, at most
constexpr long kElementsPerBlock = 16384;  // below this per block, fewer blocks

// Block b sums elements b·stride + ... in a fixed grid-stride order (grid size from n only).
__global__ void __launch_bounds__(kThreads)
    partial_squares_kernel(double* partial, const float* values, long n) {
  __shared__ double shared[32];
  double sum = 0.0;
  const long stride = static_cast<long>(gridDim.x) * kThreads;
  for (long i = static_cast<long>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const double x = values[i];
    sum += x * x;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kMaxPartials)
    finish_squares_kernel(double* sum, const double* partial, int count) {
  __shared__ double shared[32];
  const double x = threadIdx.x < count ? partial[threadIdx.x] : 0.0;
  const double total = block_sum(x, shared);
  if (threadIdx.x == 0) *sum = total;
}

template <class T>
__global__ void __launch_bounds__(kThreads) nonfinite_kernel(int* flag, const T* values, long n) {
  bool found = false;
  const long stride = static_cast<long>(gridDim.x) * kThreads;
  for (long i = static_cast<long>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    found = found || !isfinite(to_float(values[i]));
  // Every writer stores the same 1, so the race between blocks is benign and the result exact.
  if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}

__global__ void scale_from_norm_kernel(float* scale, const double* sum_of_squares,
                                       float inv_loss_scale, float max_norm) {
  const double norm = sqrt(*sum_of_squares) * inv_loss_scale;
  if (!isfinite(norm)) {
    *scale = NAN;
    return;
  }
  const double clip = (max_norm > 0 && norm > max_norm) ? max_norm / norm : 1.0;
  *scale = static_cast<float>(inv_loss_scale * clip);
}

}  // namespace

void sum_of_squares(double* sum, const float* values, long n, DeviceArena& arena,
                    cudaStream_t stream) {
  STRATA_CHECK(n >= 0);
  const int blocks = static_cast<int>(std::clamp((n + kElementsPerBlock - 1) / kElementsPerBlock,
                                                 1L, static_cast<long>(kMaxPartials)));
  ArenaScope scope(arena);
  double* partial = arena.allocate<double>(static_cast<std::size_t>(blocks));
  partial_squares_kernel<<<blocks, kThreads, 0, stream>>>(partial, values, n);
  STRATA_CUDA_CHECK_LAUNCH();
  finish_squares_kernel<<<1, kMaxPartials, 0, stream>>>(sum, partial, blocks);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void any_nonfinite(int* flag, const T* values, long n, bool accumulate, cudaStream_t stream) {
  STRATA_CHECK(n >= 0);
  if (!accumulate) STRATA_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  if (n == 0) return;
  const long blocks = std::clamp((n + kElementsPerBlock - 1) / kElementsPerBlock, 1L,
                                 static_cast<long>(kMaxPartials));
  nonfinite_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(flag, values, n);
  STRATA_CUDA_CHECK_LAUNCH();
}

void gradient_scale_from_norm(float* scale, const double* sum_of_squares, float inv_loss_scale,
                              float max_norm, cudaStream_t stream) {
  scale_from_norm_kernel<<<1, 1, 0, stream>>>(scale, sum_of_squares, inv_loss_scale, max_norm);
  STRATA_CUDA_CHECK_LAUNCH();
}

template void any_nonfinite<float>(int*, const float*, long, bool, cudaStream_t);
template void any_nonfinite<__nv_bfloat16>(int*, const __nv_bfloat16*, long, bool, cudaStream_t);
template void any_nonfinite<__half>(int*, const __half*, long, bool, cudaStream_t);

}  // namespace strata::cuda
