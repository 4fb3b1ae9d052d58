#include "model/kernels/cpu/gelu.h"

#include "model/kernels/cpu/vector_math.h"

namespace strata::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kCubic = 0.044715;

// 0.5·(1 + tanh(u)) is exactly the logistic sigmoid of 2u, σ = 1 / (1 + e), e = exp(−2u), so the
// GELU needs one exp and one division instead of a tanh: the loops below vectorise, and nothing
// cancels (1 + tanh(u) for u ≪ 0 does; so does 1 − σ for u ≫ 0, which the backward pass takes as
// σ·e instead).
template <class T>
T exp_of_minus_twice(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
  return exp_approx(T(-2) * u);
}

template <class T>
T gelu(T x) {
  return x / (T(1) + exp_of_minus_twice(x));
}
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}

template <class T>
void bias_gelu_forward(T* out, T* pre, const T* bias, int N, int H, ComputeDtype dtype) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* x = pre + static_cast<long>(n) * H;
    T* y = out + static_cast<long>(n) * H;
    if (bias != nullptr) {
#pragma omp simd
      for (int h = 0; h < H; ++h) x[h] += bias[h];
    }
    round_span(x, H, dtype);
#pragma omp simd
    for (int h = 0; h < H; ++h) y[h] = gelu(x[h]);
    round_span(y, H, dtype);
  }
}

// d/dx [x·σ] = σ + 2x·σ·(1 − σ)·du/dx, the same as 0.5·(1 + tanh u) + 0.5·x·sech²(u)·du/dx.
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; ++i) {
    const T x = inp[i];
    const T e = exp_of_minus_twice(x);
    const T sigma = T(1) / (T(1) + e);
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
    dinp[i] = (sigma + T(2) * x * du * sigma * (sigma * e)) * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, long);
template void gelu_forward<double>(double*, const double*, long);
template void bias_gelu_forward<float>(float*, float*, const float*, int, int, ComputeDtype);
template void bias_gelu_forward<double>(double*, double*, const double*, int, int, ComputeDtype);
template void gelu_backward<float>(float*, const float*, const float*, long);
template void gelu_backward<double>(double*, const double*, const double*, long);

}  // namespace strata::cpu
