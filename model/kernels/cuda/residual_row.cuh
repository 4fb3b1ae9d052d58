// The residual add that opens a norm's fused forward (residual_layernorm_forward in layernorm.cu,
// residual_rmsnorm_forward in rmsnorm.cu), written once: lane `lane` of a row's warp computes its
// elements [l·kN + 32·kN·i, ... + kN) of sum_out = residual + (y + y_bias), rounded to T, as the
// CPU's residual_bias_forward adds them (without a bias: residual + y), and hands each rounded
// value to `visit`, which gathers the norm's row statistic. `sum_out`, `residual` and `y` point
// at the row; `y_bias` (C, may be null) at the columns.
#pragma once

#include "model/kernels/cuda/dtype.cuh"

namespace strata::cuda {

template <int kN, class T, class Visit>
__device__ void residual_add_row(T* sum_out, const T* residual, const T* y, const T* y_bias, int C,
                                 int lane, Visit&& visit) {
  for (int c = lane * kN; c < C; c += 32 * kN) {
    const Vec<T, kN> a = load_vec<kN>(residual + c);
    const Vec<T, kN> b = load_vec<kN>(y + c);
    Vec<T, kN> sum;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      float branch = to_float(b.v[k]);
      if (y_bias != nullptr) branch += to_float(y_bias[c + k]);
      sum.v[k] = from_float<T>(to_float(a.v[k]) + branch);
      visit(to_float(sum.v[k]));
    }
    store_vec(sum_out + c, sum);
  }
}

}  // namespace strata::cuda
