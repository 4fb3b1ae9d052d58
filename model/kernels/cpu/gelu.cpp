#include "model/kernels/cpu/gelu.h"

#include <cmath>

namespace strata::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kCubic = 0.044715;
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
    const T th = std::tanh(u);
    const T sech2 = T(1) - th * th;
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
    dinp[i] = (T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * du) * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, long);
template void gelu_forward<double>(double*, const double*, long);
template void gelu_backward<float>(float*, const float*, const float*, long);
template void gelu_backward<double>(double*, const double*, const double*, long);

}  // namespace strata::cpu
