#include "model/kernels/cuda/gelu.h"

#include "model/kernels/cuda/elementwise.cuh"
#include "model/kernels/cuda/fp8_cast_output.cuh"

namespace strata::cuda {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // √(2/π)
constexpr float kCubic = 0.044715f;

// e^(−2u), u = √(2/π)·(x + 0.044715·x³). expf, not __expf: the fp32 path is held to 1e-5 of the
// CPU reference, and __expf's error grows with |argument|. The argument is clamped to [−87, 87]
// as the CPU's exp_approx does, so e stays finite: for x below about −10, e^(−2u) would overflow
// and σ·e in the backward pass would be 0·inf = NaN instead of 0.
__device__ __forceinline__ float exp_of_minus_twice_u(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return expf(fminf(fmaxf(-2.0f * u, -87.0f), 87.0f));
}

struct GeluForward {
  __device__ float operator()(float x) const { return x / (1.0f + exp_of_minus_twice_u(x)); }
};

// d/dx [x·σ(2u)] = σ + 2x·σ·(1 − σ)·du/dx with 1 − σ taken as σ·e (no cancellation for u ≫ 0).
struct GeluBackward {
  __device__ float operator()(float x, float dout) const {
    const float e = exp_of_minus_twice_u(x);
    const float sigma = 1.0f / (1.0f + e);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    return (sigma + 2.0f * x * du * sigma * (sigma * e)) * dout;
  }
};

// One value per thread and grid-stride step, cast as it is stored (fp8_cast_output.cuh).
template <class T>
__global__ void __launch_bounds__(kMapThreads)
    gelu_forward_fp8_kernel(T* out, const T* inp, long n, Fp8CastOutput cast) {
  Fp8Caster caster(cast);
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x) {
    const T stored = from_float<T>(GeluForward{}(to_float(inp[i])));
    out[i] = stored;
    caster.cast(i, to_float(stored));
  }
  caster.join_amax();
}
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, long n, cudaStream_t stream) {
  launch_unary_map(out, inp, n, GeluForward{}, stream);
}

template <class T>
void gelu_forward_fp8(T* out, const T* inp, long n, const Fp8CastOutput& cast,
                      cudaStream_t stream) {
  if (n <= 0) return;
  gelu_forward_fp8_kernel<<<map_blocks(n), kMapThreads, 0, stream>>>(out, inp, n, cast);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n, cudaStream_t stream) {
  launch_binary_map(dinp, inp, dout, n, GeluBackward{}, stream);
}

#define STRATA_INSTANTIATE(T)                                                                \
  template void gelu_forward<T>(T*, const T*, long, cudaStream_t);                           \
  template void gelu_forward_fp8<T>(T*, const T*, long, const Fp8CastOutput&, cudaStream_t); \
  template void gelu_backward<T>(T*, const T*, const T*, long, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
