// Host-side conversions between float and the compute dtypes (float, __nv_bfloat16, __half), for
// setting up device inputs and reading results back (tests, benchmarks). Rounding to bf16/fp16 is
// round-to-nearest-even, as the kernels' (dtype.cuh, device-side) and the CPU backend's emulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>
#include <vector>

namespace strata::cuda {

template <class T>
T dtype_from_float(float x) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> ||
                std::is_same_v<T, __half>);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else
    return x;
}
inline float dtype_to_float(float x) { return x; }
inline float dtype_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float dtype_to_float(__half x) { return __half2float(x); }

template <class T>
std::vector<T> to_dtype(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = dtype_from_float<T>(x[i]);
  return y;
}
template <class T>
std::vector<float> to_floats(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = dtype_to_float(x[i]);
  return y;
}

}  // namespace strata::cuda
