// SwiGLU, the activation of a Llama MLP (Shazeer 2020, "GLU Variants Improve Transformer"), per
// element, written once for the CPU reference (model/kernels/cpu/swiglu.h) and the CUDA kernels
// (model/kernels/cuda/swiglu.h), so both run the same operations in the same order:
//   out = silu(g)·u,  silu(x) = x·σ(x),  σ(x) = 1 / (1 + e^(−x))
//   dg  = dout·u·silu'(g),  silu'(x) = σ(x)·(1 + x·(1 − σ(x)))
//   du  = dout·silu(g)
// g is the gate, u the up projection: the two halves of one row of the fused gate-up GEMM's output,
// h (N, 2F) = [g | u] per row, the gate first (as the fused weight's rows; the kernels' headers).
//
// σ is taken from t = e^(−|x|) ∈ (0, 1], never from e^(−x), which overflows for x ≪ 0: with
// r = 1 / (1 + t), σ(|x|) = r and σ(−|x|) = t·r, and 1 − σ(x) = σ(−x) is the other of the two, so
// neither σ nor 1 − σ is a difference (1 − σ for x ≫ 0 would cancel to 0 long before σ·e^(−x)
// does). Every finite x gives finite results: e.g. x = −1000 gives σ = 0 and silu = silu' = 0,
// x = 1e30 gives σ = 1, silu = x and silu' = 1. A non-finite x gives non-finite results (±inf, or
// NaN from ±inf·0), so an overflow upstream still reaches the loss scaler's inf/NaN check.
#pragma once

#include <cmath>

#include "model/core/host_device.h"
#include "model/kernels/cpu/vector_math.h"

namespace strata {

// e^x for x <= 0 (the argument is −|x|): in (0, 1], never overflowing.
STRATA_HOST_DEVICE inline float exp_of_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
  // expf, not __expf: the fp32 kernels are held to 1e-5 of the CPU reference. It underflows to 0
  // below about −104.
  return expf(x);
#else
  // exp_approx vectorises (cpu/vector_math.h) but clamps its argument at −87, where it returns
  // e^−87 ≈ 1.6e-38 however small x is; 0 there instead, as the device's expf gives, so that
  // x·(1 − σ(x)) goes to 0 for huge x (x·e^−87 would be 5 at x = 3e38). A NaN x takes the 0
  // too (it would be cast to an integer inside exp_approx); the NaN reaches the result through
  // the x that multiplies σ.
  return x >= -87.0f ? cpu::exp_approx(x) : 0.0f;
#endif
}

// Exact for the double instantiations (the finite-difference reference).
STRATA_HOST_DEVICE inline double exp_of_nonpositive(double x) {
  using std::exp;
  return exp(x);
}

// σ(x) and 1 − σ(x) = σ(−x), each without cancellation (see the header).
template <class T>
struct SigmoidPair {
  T value;       // σ(x)
  T complement;  // 1 − σ(x)
};

template <class T>
STRATA_HOST_DEVICE inline SigmoidPair<T> sigmoid_pair(T x) {
  const T t = exp_of_nonpositive(x < T(0) ? x : -x);  // e^(−|x|); NaN stays NaN
  const T r = T(1) / (T(1) + t);
  const T small = t * r;  // σ(−|x|)
  return x >= T(0) ? SigmoidPair<T>{r, small} : SigmoidPair<T>{small, r};
}

// silu(x) = x·σ(x) and silu'(x) = σ(x)·(1 + x·(1 − σ(x))), from x and its sigmoid pair (the
// backward pass needs both, from one exponential).
template <class T>
STRATA_HOST_DEVICE inline T silu(T x, const SigmoidPair<T>& s) {
  return x * s.value;
}

template <class T>
STRATA_HOST_DEVICE inline T silu_derivative(T x, const SigmoidPair<T>& s) {
  return s.value * (T(1) + x * s.complement);
}

// out = silu(g)·u.
template <class T>
STRATA_HOST_DEVICE inline T swiglu_element(T g, T u) {
  return silu(g, sigmoid_pair(g)) * u;
}

// The gradients of one gate-up pair from the output's gradient dout.
template <class T>
struct SwigluGradient {
  T dg;  // dout·u·silu'(g)
  T du;  // dout·silu(g)
};

template <class T>
STRATA_HOST_DEVICE inline SwigluGradient<T> swiglu_element_backward(T g, T u, T dout) {
  const SigmoidPair<T> s = sigmoid_pair(g);
  return SwigluGradient<T>{dout * u * silu_derivative(g, s), dout * silu(g, s)};
}

}  // namespace strata
