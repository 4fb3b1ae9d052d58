// Helpers shared by the CUDA op tests: device buffers, host-side dtype conversion, per-test seeded
// random inputs, the relative error norm and the tolerances every comparison uses.
//
// Tolerances (relative error norm ‖got − want‖ / ‖want‖ against the fp32 CPU reference run on the
// same, dtype-rounded inputs): fp32 1e-5; bf16 1e-2 (8 significant bits: one rounding of an output
// is up to 2^-9 ≈ 2e-3 per element, a few stacked roundings stay well inside 1e-2); fp16 5e-3
// (11 bits, but the attention probabilities and dS lose more in fp16's narrow range).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_buffer.h"
#include "model/kernels/cuda/host_dtype.h"

namespace strata::cuda::testing {

// Device arrays (model/kernels/cuda/device_buffer.h): upload() and download() synchronise the
// whole device, so kernels queued on a context's non-blocking stream have finished.
using cuda::DeviceBuffer;

// Host conversions (model/kernels/cuda/host_dtype.h).
using cuda::dtype_from_float;
using cuda::dtype_to_float;
using cuda::to_dtype;
using cuda::to_floats;

// `count` elements at a device pointer the caller does not own (a model's losses, its boundary
// arrays), after every queued kernel has finished.
template <class T>
std::vector<T> download(const T* device, std::size_t count) {
  std::vector<T> host(count);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  STRATA_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// The values a T buffer holds after storing `x`: the CPU reference runs on exactly these.
template <class T>
std::vector<float> rounded(const std::vector<float>& x) {
  return to_floats(to_dtype<T>(x));
}

// A generator seeded from the running test's full name (FNV-1a): fresh inputs per test, the same
// on every run.
inline std::mt19937_64 test_rng() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return std::mt19937_64(hash);
}

inline std::vector<float> random_floats(std::size_t n, std::mt19937_64& rng, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// ‖got − want‖ / ‖want‖ (‖got‖ when want is 0), in double.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

template <class T>
constexpr double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return 1e-2;
  if constexpr (std::is_same_v<T, __half>) return 5e-3;
}
// fp32 results computed in fp32 from exactly representable inputs (sums of gradients into fp32
// buffers, statistics): the fp32 bound whatever the storage dtype of the inputs.
inline constexpr double kFp32Tolerance = 1e-5;

using ComputeDtypes = ::testing::Types<float, __nv_bfloat16, __half>;

struct DtypeName {
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "fp32";
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return "bf16";
    if constexpr (std::is_same_v<T, __half>) return "fp16";
  }
};

}  // namespace strata::cuda::testing
