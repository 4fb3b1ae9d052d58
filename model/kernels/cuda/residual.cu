#include "model/kernels/cuda/residual.h"

#include "model/kernels/cuda/column_sums.cuh"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {
namespace {

// Thread per kN consecutive channels of one row (kN divides C when vectorised).
template <int kN, class T>
__global__ void residual_bias_kernel(T* out, const T* x, const T* y, const T* bias, long n_total,
                                     int C) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x * kN;
  for (long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kN; i < n_total;
       i += stride) {
    const int c = static_cast<int>(i % C);
    const Vec<T, kN> a = load_vec<kN>(x + i);
    const Vec<T, kN> b = load_vec<kN>(y + i);
    Vec<T, kN> r;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float add = bias != nullptr ? to_float(bias[c + k]) : 0.0f;
      r.v[k] = from_float<T>(to_float(a.v[k]) + (to_float(b.v[k]) + add));
    }
    store_vec(out + i, r);
  }
}

template <class T>
struct BiasGradient {
  const T* dout;
  int C;
  __device__ void operator()(int n, int c, float (&acc)[1]) const {
    acc[0] += to_float(dout[static_cast<long>(n) * C + c]);
  }
};

}  // namespace

template <class T>
void residual_bias_forward(T* out, const T* x, const T* y, const T* bias, int N, int C,
                           cudaStream_t stream) {
  const long n_total = static_cast<long>(N) * C;
  if (n_total <= 0) return;
  constexpr int kN = kVec16<T>;
  if (C % kN == 0 && is_aligned(out, 16) && is_aligned(x, 16) && is_aligned(y, 16)) {
    residual_bias_kernel<kN>
        <<<map_blocks(n_total / kN), kMapThreads, 0, stream>>>(out, x, y, bias, n_total, C);
  } else {
    residual_bias_kernel<1>
        <<<map_blocks(n_total), kMapThreads, 0, stream>>>(out, x, y, bias, n_total, C);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void bias_backward(float* dbias, const T* dout, int N, int C, DeviceArena& arena,
                   cudaStream_t stream) {
  launch_column_sums<1>(ColumnOutputs<1>{{dbias}}, BiasGradient<T>{dout, C}, N, C, arena, stream);
}

#define STRATA_INSTANTIATE(T)                                                        \
  template void residual_bias_forward<T>(T*, const T*, const T*, const T*, int, int, \
                                         cudaStream_t);                              \
  template void bias_backward<T>(float*, const T*, int, int, DeviceArena&, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
