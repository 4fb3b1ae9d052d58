#include "model/kernels/cuda/accumulate.h"

#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {
namespace {
struct Plus {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__global__ void fill_kernel(float* out, float value, long n) {
  const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
}  // namespace

// Each element is read and written by the same thread, so the output may be the first input.
void add_into(float* sum, const float* addend, long n, cudaStream_t stream) {
  launch_binary_map(sum, sum, addend, n, Plus{}, stream);
}

void fill(float* out, float value, long n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  fill_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      out, value, n);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
