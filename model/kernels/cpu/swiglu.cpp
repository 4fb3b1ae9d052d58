#include "model/kernels/cpu/swiglu.h"

#include "model/kernels/swiglu.h"

namespace strata::cpu {

// One row per iteration of the parallel loop, its F pairs in a SIMD loop: swiglu_element is
// branch-free arithmetic (the sigmoid's two cases are selects) on float's exp_approx, which GCC
// vectorises.
template <class T>
void swiglu_forward(T* out, const T* h, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* g = h + 2L * n * F;
    const T* u = g + F;
    T* y = out + static_cast<long>(n) * F;
#pragma omp simd
    for (int f = 0; f < F; ++f) y[f] = swiglu_element(g[f], u[f]);
  }
}

template <class T>
void swiglu_backward(T* dh, const T* dout, const T* h, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* g = h + 2L * n * F;
    const T* u = g + F;
    const T* dy = dout + static_cast<long>(n) * F;
    T* dg = dh + 2L * n * F;
    T* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const SwigluGradient<T> d = swiglu_element_backward(g[f], u[f], dy[f]);
      dg[f] = d.dg;
      du[f] = d.du;
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);

}  // namespace strata::cpu
