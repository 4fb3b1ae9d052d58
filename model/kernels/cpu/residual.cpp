#include "model/kernels/cpu/residual.h"

#include <algorithm>

namespace strata::cpu {

template <class T>
void residual_bias_forward(T* out, const T* x, const T* y, const T* bias, int N, int C) {
  if (bias == nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const long row = static_cast<long>(n) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) out[row + c] = x[row + c] + y[row + c];
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const long row = static_cast<long>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) out[row + c] = x[row + c] + (y[row + c] + bias[c]);
  }
}

template <class T>
void bias_backward(T* dbias, const T* dout, int N, int C) {
  constexpr int kSlice = 16;  // channels per thread: each thread owns its columns
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = std::min(c0 + kSlice, C);
    for (int n = 0; n < N; ++n) {
      const T* d = dout + static_cast<long>(n) * C;
      for (int c = c0; c < c1; ++c) dbias[c] += d[c];
    }
  }
}

template void residual_bias_forward<float>(float*, const float*, const float*, const float*, int,
                                           int);
template void residual_bias_forward<double>(double*, const double*, const double*, const double*,
                                            int, int);
template void bias_backward<float>(float*, const float*, int, int);
template void bias_backward<double>(double*, const double*, int, int);

}  // namespace strata::cpu
