// Status: ran on an NVIDIA H200 (2026-11-26): every `cuda` test passed (docs/PERFORMANCE.md).
#include "model/kernels/cuda/accumulate.h"

#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {
namespace {
struct Plus {
  __device__ float operator()(float a, float b) const { return a + b; }
};
}  // namespace

// Each element is read and written by the same thread, so the output may be the first input.
void add_into(float* sum, const float* addend, long n, cudaStream_t stream) {
  launch_binary_map(sum, sum, addend, n, Plus{}, stream);
}

}  // namespace strata::cuda
