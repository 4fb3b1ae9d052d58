#include "model/kernels/cuda/rmsnorm.h"

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/column_sums.cuh"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/fp8_cast_output.cuh"
#include "model/kernels/cuda/reduce.cuh"
#include "model/kernels/cuda/residual_row.cuh"
#include "model/kernels/rmsnorm.h"

namespace strata::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kThreads = kRowsPerBlock * 32;

// Lane l of a row's warp handles elements [l·kN + 32·kN·i, ... + kN). Rows past N exit as a whole
// warp, so the shuffles of group_sum always have all 32 lanes.
template <class T, int kN>
__global__ void __launch_bounds__(kThreads)
    residual_rmsnorm_forward_kernel(T* sum_out, T* out, float* rstd, const T* residual, const T* y,
                                    const T* y_bias, const T* weight, int N, int C, float eps,
                                    Fp8CastOutput cast) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const long base = static_cast<long>(row) * C;
  const T* x = residual + base;
  float sum_of_squares = 0.0f;
  if (y != nullptr) {
    residual_add_row<kN>(sum_out + base, residual + base, y + base, y_bias, C, lane,
                         [&](float v) { sum_of_squares += v * v; });
    x = sum_out + base;  // re-read below by the lanes that wrote it: no synchronisation needed
  } else {
    for (int c = lane * kN; c < C; c += 32 * kN) {
      const Vec<T, kN> a = load_vec<kN>(x + c);
#pragma unroll
      for (int k = 0; k < kN; ++k) sum_of_squares += to_float(a.v[k]) * to_float(a.v[k]);
    }
  }
  const float s = rmsnorm_rstd(group_sum(sum_of_squares), C, eps);
  Fp8Caster caster(cast);
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> a = load_vec<kN>(x + c);
    const Vec<T, kN> w = load_vec<kN>(weight + c);
    Vec<T, kN> o;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      o.v[k] = from_float<T>(rmsnorm_output(to_float(a.v[k]), s, to_float(w.v[k])));
      caster.cast(base + c + k, to_float(o.v[k]));
    }
    store_vec(out + base + c, o);
  }
  caster.join_amax();
  if (lane == 0 && rstd != nullptr) rstd[row] = s;
}

template <class T, int kN>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                  const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const long base = static_cast<long>(row) * C;
  const float s = rstd[row];
  float sum_of_products = 0.0f;
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> x = load_vec<kN>(inp + base + c);
    const Vec<T, kN> dy = load_vec<kN>(dout + base + c);
    const Vec<T, kN> w = load_vec<kN>(weight + c);
#pragma unroll
    for (int k = 0; k < kN; ++k)
      sum_of_products +=
          rmsnorm_input_product(to_float(x.v[k]), to_float(w.v[k]), to_float(dy.v[k]));
  }
  const float factor = rmsnorm_row_factor(group_sum(sum_of_products), C, s);
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> x = load_vec<kN>(inp + base + c);
    const Vec<T, kN> dy = load_vec<kN>(dout + base + c);
    const Vec<T, kN> w = load_vec<kN>(weight + c);
    Vec<T, kN> dx = load_vec<kN>(dinp + base + c);
#pragma unroll
    for (int k = 0; k < kN; ++k)
      dx.v[k] = from_float<T>(
          to_float(dx.v[k]) +
          rmsnorm_input_gradient(to_float(x.v[k]), to_float(w.v[k]), to_float(dy.v[k]), s, factor));
    store_vec(dinp + base + c, dx);
  }
}

// value_0 = dout · inp · rstd (dweight).
template <class T>
struct RmsNormWeightGradient {
  const T* dout;
  const T* inp;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float (&acc)[1]) const {
    const long i = static_cast<long>(n) * C + c;
    acc[0] += rmsnorm_weight_gradient(to_float(inp[i]), rstd[n], to_float(dout[i]));
  }
};

unsigned row_blocks(int N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

template <class T>
void residual_rmsnorm_forward(T* sum_out, T* out, float* rstd, const T* residual, const T* y,
                              const T* y_bias, const T* weight, int N, int C, double eps,
                              cudaStream_t stream, const Fp8CastOutput& cast) {
  STRATA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  const float eps32 = static_cast<float>(eps);
  if (vector_rows<T>(C, sum_out, out, residual, y, weight)) {
    residual_rmsnorm_forward_kernel<T, kVec16<T>><<<row_blocks(N), kThreads, 0, stream>>>(
        sum_out, out, rstd, residual, y, y_bias, weight, N, C, eps32, cast);
  } else {
    residual_rmsnorm_forward_kernel<T, 1><<<row_blocks(N), kThreads, 0, stream>>>(
        sum_out, out, rstd, residual, y, y_bias, weight, N, C, eps32, cast);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int N, int C, DeviceArena& arena, cudaStream_t stream) {
  rmsnorm_backward_input(dinp, dout, inp, weight, rstd, N, C, stream);
  rmsnorm_backward_weight(dweight, dout, inp, rstd, N, C, arena, stream);
}

template <class T>
void rmsnorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight,
                            const float* rstd, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  if (vector_rows<T>(C, dinp, dout, inp, weight)) {
    rmsnorm_backward_input_kernel<T, kVec16<T>>
        <<<row_blocks(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
  } else {
    rmsnorm_backward_input_kernel<T, 1>
        <<<row_blocks(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward_weight(float* dweight, const T* dout, const T* inp, const float* rstd, int N,
                             int C, DeviceArena& arena, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  launch_column_sums<1>(ColumnOutputs<1>{{dweight}}, RmsNormWeightGradient<T>{dout, inp, rstd, C},
                        N, C, arena, stream);
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template void residual_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, const T*,        \
                                            const T*, int, int, double, cudaStream_t,            \
                                            const Fp8CastOutput&);                               \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int, \
                                    int, DeviceArena&, cudaStream_t);                            \
  template void rmsnorm_backward_input<T>(T*, const T*, const T*, const T*, const float*, int,   \
                                          int, cudaStream_t);                                    \
  template void rmsnorm_backward_weight<T>(float*, const T*, const T*, const float*, int, int,   \
                                           DeviceArena&, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
