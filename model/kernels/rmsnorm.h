// The per-row and per-element arithmetic of RMSNorm (Llama's normalisation: no mean subtraction,
// no bias), written once for the CPU reference (model/kernels/cpu/rmsnorm.h) and the CUDA kernels
// (model/kernels/cuda/rmsnorm.h), so both run the same operations in the same order on each
// element; only the order of the row and column sums differs between the backends.
//
// For a row x of C channels, weight w (C) and eps (the caller's, Llama's `norm_eps`):
//   rstd = 1 / √(Σ x² / C + eps)                     rmsnorm_rstd(Σ x², C, eps)
//   out  = x · rstd · w                               rmsnorm_output
// Backward, with g = w ⊙ dout and y = x·rstd·w:
//   ∂rstd/∂x_j = −rstd³ · x_j / C, so
//   dx_j = rstd · (g_j − x_j · rstd² · mean(x ⊙ g))   rmsnorm_input_gradient, its per-row factor
//                                                     rstd² · mean(x ⊙ g) rmsnorm_row_factor
//   dw_c = Σ_rows dout_c · x_c · rstd                 rmsnorm_weight_gradient (one row's term)
// T is float or double on the CPU, float on the GPU (all of its arithmetic is fp32).
#pragma once

#include <cmath>

#include "model/core/host_device.h"

namespace strata {

// 1 / √(mean of squares + eps) from the row's sum of squares.
template <class T>
STRATA_HOST_DEVICE inline T rmsnorm_rstd(T sum_of_squares, int C, T eps) {
  using std::sqrt;
  return T(1) / sqrt(sum_of_squares / static_cast<T>(C) + eps);
}

template <class T>
STRATA_HOST_DEVICE inline T rmsnorm_output(T x, T rstd, T weight) {
  return x * rstd * weight;
}

// x ⊙ g, the terms of the input gradient's row sum.
template <class T>
STRATA_HOST_DEVICE inline T rmsnorm_input_product(T x, T weight, T dout) {
  return x * (weight * dout);
}

// rstd² · mean(x ⊙ g) from the row's Σ x ⊙ g.
template <class T>
STRATA_HOST_DEVICE inline T rmsnorm_row_factor(T sum_of_products, int C, T rstd) {
  return rstd * rstd * (sum_of_products / static_cast<T>(C));
}

// rstd · (g − x · factor): the element's input gradient (added into dinp by the caller).
template <class T>
STRATA_HOST_DEVICE inline T rmsnorm_input_gradient(T x, T weight, T dout, T rstd, T factor) {
  return rstd * (weight * dout - x * factor);
}

// One row's term of the weight gradient, dout · x · rstd.
template <class T>
STRATA_HOST_DEVICE inline T rmsnorm_weight_gradient(T x, T rstd, T dout) {
  return x * rstd * dout;
}

}  // namespace strata
