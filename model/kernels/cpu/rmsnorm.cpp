#include "model/kernels/cpu/rmsnorm.h"

#include <algorithm>

#include "model/kernels/rmsnorm.h"

namespace strata::cpu {

namespace {

// One row of rmsnorm_forward. `simd` lets the sum of squares run across vector lanes (without it
// GCC keeps the additions in order, one dependent scalar add per element).
template <class T>
void rmsnorm_row(T* y, T& rstd, const T* x, const T* weight, int C, T eps) {
  T sum_of_squares = 0;
#pragma omp simd reduction(+ : sum_of_squares)
  for (int c = 0; c < C; ++c) sum_of_squares += x[c] * x[c];
  const T s = rmsnorm_rstd(sum_of_squares, C, eps);
#pragma omp simd
  for (int c = 0; c < C; ++c) y[c] = rmsnorm_output(x[c], s, weight[c]);
  rstd = s;
}

}  // namespace

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const long row = static_cast<long>(n) * C;
    rmsnorm_row(out + row, rstd[n], inp + row, weight, C, static_cast<T>(eps));
  }
}

template <class T>
void residual_rmsnorm_forward(T* sum_out, T* out, T* rstd, const T* residual, const T* y,
                              const T* y_bias, const T* weight, int N, int C, double eps,
                              ComputeDtype dtype) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const long row = static_cast<long>(n) * C;
    T* s = sum_out + row;
    if (y_bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) s[c] = residual[row + c] + (y[row + c] + y_bias[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) s[c] = residual[row + c] + y[row + c];
    }
    round_span(s, C, dtype);
    rmsnorm_row(out + row, rstd[n], s, weight, C, static_cast<T>(eps));
    round_span(out + row, C, dtype);
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C) {
  rmsnorm_backward_input(dinp, dout, inp, weight, rstd, N, C);
  rmsnorm_backward_weight(dweight, dout, inp, rstd, N, C);
}

template <class T>
void rmsnorm_backward_input(T* dinp, const T* dout, const T* inp, const T* weight, const T* rstd,
                            int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    const T* dy = dout + static_cast<long>(n) * C;
    T* dx = dinp + static_cast<long>(n) * C;
    const T s = rstd[n];
    T sum_of_products = 0;
#pragma omp simd reduction(+ : sum_of_products)
    for (int c = 0; c < C; ++c) sum_of_products += rmsnorm_input_product(x[c], weight[c], dy[c]);
    const T factor = rmsnorm_row_factor(sum_of_products, C, s);
#pragma omp simd
    for (int c = 0; c < C; ++c) dx[c] += rmsnorm_input_gradient(x[c], weight[c], dy[c], s, factor);
  }
}

template <class T>
void rmsnorm_backward_weight(T* dweight, const T* dout, const T* inp, const T* rstd, int N, int C) {
  // Each thread owns a slice of columns and sums its rows in order, so the result does not depend
  // on the number of threads.
  constexpr int kSlice = 16;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int slice = 0; slice < slices; ++slice) {
    const int c0 = slice * kSlice, width = std::min(kSlice, C - c0);
    T sums[kSlice] = {};
    for (int n = 0; n < N; ++n) {
      const long row = static_cast<long>(n) * C + c0;
      const T s = rstd[n];
#pragma omp simd
      for (int k = 0; k < width; ++k)
        sums[k] += rmsnorm_weight_gradient(inp[row + k], s, dout[row + k]);
    }
    for (int k = 0; k < width; ++k) dweight[c0 + k] += sums[k];
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double);
template void residual_rmsnorm_forward<float>(float*, float*, float*, const float*, const float*,
                                              const float*, const float*, int, int, double,
                                              ComputeDtype);
template void residual_rmsnorm_forward<double>(double*, double*, double*, const double*,
                                               const double*, const double*, const double*, int,
                                               int, double, ComputeDtype);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);
template void rmsnorm_backward_input<float>(float*, const float*, const float*, const float*,
                                            const float*, int, int);
template void rmsnorm_backward_input<double>(double*, const double*, const double*, const double*,
                                             const double*, int, int);
template void rmsnorm_backward_weight<float>(float*, const float*, const float*, const float*, int,
                                             int);
template void rmsnorm_backward_weight<double>(double*, const double*, const double*, const double*,
                                              int, int);

}  // namespace strata::cpu
