#include "model/kernels/cuda/layernorm.h"

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/column_sums.cuh"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/fp8_cast_output.cuh"
#include "model/kernels/cuda/reduce.cuh"
#include "model/kernels/cuda/residual_row.cuh"

namespace strata::cuda {
namespace {

constexpr int kWarps = 8;  // rows per block

// One warp per row; lane l handles elements [l·kN + 32·kN·i, ... + kN). Rows past N exit as a
// whole warp, so the shuffles below always have all 32 lanes. kBias: bias is added (not null);
// without it the output is the same expression less its last addition, not an added zero.
template <class T, int kN, bool kBias>
__global__ void __launch_bounds__(kWarps * 32)
    residual_layernorm_forward_kernel(T* sum_out, T* out, float* mean, float* rstd,
                                      const T* residual, const T* y, const T* y_bias,
                                      const T* weight, const T* bias, int N, int C, float eps,
                                      Fp8CastOutput cast) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= N) return;
  const long base = static_cast<long>(row) * C;
  const T* src = residual + base;
  float sum = 0.0f;
  if (y != nullptr) {
    residual_add_row<kN>(sum_out + base, residual + base, y + base, y_bias, C, lane,
                         [&](float v) { sum += v; });
    src = sum_out + base;  // re-read below by the lanes that wrote it: no synchronisation needed
  } else {
    for (int c = lane * kN; c < C; c += 32 * kN) {
      const Vec<T, kN> a = load_vec<kN>(src + c);
#pragma unroll
      for (int k = 0; k < kN; ++k) sum += to_float(a.v[k]);
    }
  }
  const float m = group_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> a = load_vec<kN>(src + c);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float d = to_float(a.v[k]) - m;
      var += d * d;
    }
  }
  const float s = 1.0f / sqrtf(group_sum(var) / static_cast<float>(C) + eps);
  Fp8Caster caster(cast);
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> a = load_vec<kN>(src + c);
    const Vec<T, kN> w = load_vec<kN>(weight + c);
    Vec<T, kN> o;
    if constexpr (kBias) {
      const Vec<T, kN> b = load_vec<kN>(bias + c);
#pragma unroll
      for (int k = 0; k < kN; ++k)
        o.v[k] = from_float<T>((to_float(a.v[k]) - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k)
        o.v[k] = from_float<T>((to_float(a.v[k]) - m) * s * to_float(w.v[k]));
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) caster.cast(base + c + k, to_float(o.v[k]));
    store_vec(out + base + c, o);
  }
  caster.join_amax();
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = s;
  }
}

template <class T, int kN>
__global__ void __launch_bounds__(kWarps * 32)
    layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                    const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= N) return;
  const long base = static_cast<long>(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> x = load_vec<kN>(inp + base + c);
    const Vec<T, kN> dy = load_vec<kN>(dout + base + c);
    const Vec<T, kN> w = load_vec<kN>(weight + c);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float norm = (to_float(x.v[k]) - m) * s;
      const float dnorm = to_float(w.v[k]) * to_float(dy.v[k]);
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
  }
  const float dnorm_mean = group_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = group_sum(dnorm_norm_sum) / static_cast<float>(C);
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> x = load_vec<kN>(inp + base + c);
    const Vec<T, kN> dy = load_vec<kN>(dout + base + c);
    const Vec<T, kN> w = load_vec<kN>(weight + c);
    Vec<T, kN> dx = load_vec<kN>(dinp + base + c);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float norm = (to_float(x.v[k]) - m) * s;
      const float dnorm = to_float(w.v[k]) * to_float(dy.v[k]);
      dx.v[k] =
          from_float<T>(to_float(dx.v[k]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
    }
    store_vec(dinp + base + c, dx);
  }
}

// value_0 = norm·dout (dweight), value_1 = dout (dbias; K = 1: no bias gradient). Each column
// sum is independent of the others, so dweight is the same bits with K = 1 as with K = 2.
template <class T, int K>
struct LayerNormParameterGradients {
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float (&acc)[K]) const {
    const long i = static_cast<long>(n) * C + c;
    const float dy = to_float(dout[i]);
    acc[0] += (to_float(inp[i]) - mean[n]) * rstd[n] * dy;
    if constexpr (K == 2) acc[1] += dy;
  }
};

template <class T, int kN>
void launch_forward(T* sum_out, T* out, float* mean, float* rstd, const T* residual, const T* y,
                    const T* y_bias, const T* weight, const T* bias, int N, int C, float eps,
                    cudaStream_t stream, const Fp8CastOutput& cast) {
  const unsigned blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  if (bias != nullptr) {
    residual_layernorm_forward_kernel<T, kN, true><<<blocks, kWarps * 32, 0, stream>>>(
        sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N, C, eps, cast);
  } else {
    residual_layernorm_forward_kernel<T, kN, false><<<blocks, kWarps * 32, 0, stream>>>(
        sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N, C, eps, cast);
  }
}

}  // namespace

template <class T>
void residual_layernorm_forward(T* sum_out, T* out, float* mean, float* rstd, const T* residual,
                                const T* y, const T* y_bias, const T* weight, const T* bias, int N,
                                int C, double eps, cudaStream_t stream, const Fp8CastOutput& cast) {
  STRATA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  const float eps32 = static_cast<float>(eps);  // added in fp32, as the CPU adds it in float
  if (vector_rows<T>(C, sum_out, out, residual, y, weight, bias)) {
    launch_forward<T, kVec16<T>>(sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N, C,
                                 eps32, stream, cast);
  } else {
    launch_forward<T, 1>(sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N, C, eps32,
                         stream, cast);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C,
                        DeviceArena& arena, cudaStream_t stream) {
  layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C, stream);
  layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C, arena, stream);
}

template <class T>
void layernorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight,
                              const float* mean, const float* rstd, int N, int C,
                              cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  constexpr int kN = kVec16<T>;
  if (vector_rows<T>(C, dinp, dout, inp, weight)) {
    layernorm_backward_input_kernel<T, kN>
        <<<blocks, kWarps * 32, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  } else {
    layernorm_backward_input_kernel<T, 1>
        <<<blocks, kWarps * 32, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void layernorm_backward_weight(float* dweight, float* dbias, const T* dout, const T* inp,
                               const float* mean, const float* rstd, int N, int C,
                               DeviceArena& arena, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  if (dbias != nullptr) {
    launch_column_sums<2>(ColumnOutputs<2>{{dweight, dbias}},
                          LayerNormParameterGradients<T, 2>{dout, inp, mean, rstd, C}, N, C, arena,
                          stream);
  } else {
    launch_column_sums<1>(ColumnOutputs<1>{{dweight}},
                          LayerNormParameterGradients<T, 1>{dout, inp, mean, rstd, C}, N, C, arena,
                          stream);
  }
}

#define STRATA_INSTANTIATE(T)                                                                  \
  template void residual_layernorm_forward<T>(T*, T*, float*, float*, const T*, const T*,      \
                                              const T*, const T*, const T*, int, int, double,  \
                                              cudaStream_t, const Fp8CastOutput&);             \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*,        \
                                      const float*, const float*, int, int, DeviceArena&,      \
                                      cudaStream_t);                                           \
  template void layernorm_backward_input<T>(T*, const T*, const T*, const T*, const float*,    \
                                            const float*, int, int, cudaStream_t);             \
  template void layernorm_backward_weight<T>(float*, float*, const T*, const T*, const float*, \
                                             const float*, int, int, DeviceArena&, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
