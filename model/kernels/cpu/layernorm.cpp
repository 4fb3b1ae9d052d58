#include "model/kernels/cpu/layernorm.h"

#include <cmath>
#include <vector>

#include <omp.h>

namespace strata::cpu {

namespace {

// One row of layernorm_forward. A null bias is a second copy of the last loop rather than a
// zero added inside it, so that with a bias the arithmetic is the one it has always been.
template <class T>
void layernorm_row(T* y, T& mean, T& rstd, const T* x, const T* weight, const T* bias, int C,
                   T eps) {
  // Two passes (mean, then centred variance) avoid the cancellation of E[x²] - E[x]². `simd`
  // lets each sum run across vector lanes: without it GCC keeps the sums in order, a chain of
  // dependent scalar adds per row that cost more than the rest of the kernel.
  T m = 0;
#pragma omp simd reduction(+ : m)
  for (int c = 0; c < C; ++c) m += x[c];
  m /= C;
  T v = 0;
#pragma omp simd reduction(+ : v)
  for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
  v /= C;
  const T s = T(1) / std::sqrt(v + eps);
  if (bias != nullptr) {
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c];
  }
  mean = m;
  rstd = s;
}

// layernorm_backward_weight's sums, with (kBias) or without the bias gradient. dweight/dbias are
// sums over rows: each thread sums its static row range into a private buffer; the buffers are
// then added in thread order, so the result is reproducible. dweight's sums are the same whether
// or not dbias's run beside them.
template <bool kBias, class T>
void sum_parameter_gradients(T* dweight, T* dbias, const T* dout, const T* inp, const T* mean,
                             const T* rstd, int N, int C) {
  constexpr std::size_t kOutputs = kBias ? 2 : 1;  // dweight, then dbias, per thread
  const int threads = omp_get_max_threads();
  std::vector<T> partial(static_cast<std::size_t>(threads) * kOutputs * C, T(0));
#pragma omp parallel num_threads(threads)
  {
    T* my_dweight = partial.data() + static_cast<std::size_t>(omp_get_thread_num()) * kOutputs * C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const T* x = inp + static_cast<long>(n) * C;
      const T* dy = dout + static_cast<long>(n) * C;
      const T m = mean[n];
      const T s = rstd[n];
      if constexpr (kBias) {
        T* my_dbias = my_dweight + C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const T norm = (x[c] - m) * s;
          my_dweight[c] += norm * dy[c];
          my_dbias[c] += dy[c];
        }
      } else {
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const T norm = (x[c] - m) * s;
          my_dweight[c] += norm * dy[c];
        }
      }
    }
  }
  for (int t = 0; t < threads; ++t) {
    const T* w = partial.data() + static_cast<std::size_t>(t) * kOutputs * C;
    for (int c = 0; c < C; ++c) {
      dweight[c] += w[c];
      if constexpr (kBias) dbias[c] += w[C + c];
    }
  }
}

}  // namespace

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, double eps) {
  const T eps_t = static_cast<T>(eps);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const long row = static_cast<long>(n) * C;
    layernorm_row(out + row, mean[n], rstd[n], inp + row, weight, bias, C, eps_t);
  }
}

template <class T>
void residual_layernorm_forward(T* sum_out, T* out, T* mean, T* rstd, const T* residual, const T* y,
                                const T* y_bias, const T* weight, const T* bias, int N, int C,
                                double eps, ComputeDtype dtype) {
  const T eps_t = static_cast<T>(eps);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const long row = static_cast<long>(n) * C;
    T* s = sum_out + row;
    // As residual_bias_forward adds them: residual + (y + y_bias), or residual + y.
    if (y_bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) s[c] = residual[row + c] + (y[row + c] + y_bias[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) s[c] = residual[row + c] + y[row + c];
    }
    round_span(s, C, dtype);
    layernorm_row(out + row, mean[n], rstd[n], s, weight, bias, C, eps_t);
    round_span(out + row, C, dtype);
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
  layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C);
}

template <class T>
void layernorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight, const T* mean,
                              const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    const T* dy = dout + static_cast<long>(n) * C;
    T* dx = dinp + static_cast<long>(n) * C;
    const T m = mean[n];
    const T s = rstd[n];
    T dnorm_mean = 0;
    T dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      const T dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      const T dnorm = weight[c] * dy[c];
      dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

template <class T>
void layernorm_backward_weight(T* dweight, T* dbias, const T* dout, const T* inp, const T* mean,
                               const T* rstd, int N, int C) {
  if (dbias != nullptr)
    sum_parameter_gradients<true>(dweight, dbias, dout, inp, mean, rstd, N, C);
  else
    sum_parameter_gradients<false>(dweight, dbias, dout, inp, mean, rstd, N, C);
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, double);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, double);
template void residual_layernorm_forward<float>(float*, float*, float*, float*, const float*,
                                                const float*, const float*, const float*,
                                                const float*, int, int, double, ComputeDtype);
template void residual_layernorm_forward<double>(double*, double*, double*, double*, const double*,
                                                 const double*, const double*, const double*,
                                                 const double*, int, int, double, ComputeDtype);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);
template void layernorm_backward_input<float>(float*, const float*, const float*, const float*,
                                              const float*, const float*, int, int);
template void layernorm_backward_input<double>(double*, const double*, const double*, const double*,
                                               const double*, const double*, int, int);
template void layernorm_backward_weight<float>(float*, float*, const float*, const float*,
                                               const float*, const float*, int, int);
template void layernorm_backward_weight<double>(double*, double*, const double*, const double*,
                                                const double*, const double*, int, int);

}  // namespace strata::cpu
