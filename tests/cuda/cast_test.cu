// Dtype casts against the host's round-to-nearest-even conversions, bit for bit, on the vector
// and the element-by-element paths, including inf, NaN, overflow and subnormals; and against the
// CPU backend's emulated rounding (model/kernels/cpu/precision.h), which must be the same
// rounding for the CPU and CUDA mixed-precision paths to agree.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <type_traits>

#include "model/kernels/cpu/precision.h"
#include "model/kernels/cuda/cast.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
std::uint16_t bits(T x) {
  std::uint16_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

std::vector<float> cast_inputs(std::size_t n) {
  auto rng = test_rng();
  std::vector<float> x = random_floats(n, rng, -100000.0f, 100000.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            1e-40f,
                            -3e-8f,
                            65519.0f,
                            65520.0f,
                            1e38f,
                            3.4e38f,
                            1.0f / 3,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (std::size_t i = 0; i < std::size(specials) && i < n; ++i) x[i * 7 % n] = specials[i];
  return x;
}

template <class T>
void check_round_trip(std::size_t n, std::size_t offset) {
  const std::vector<float> x = cast_inputs(n);
  DeviceBuffer<float> in(n + offset), back(n + offset);
  DeviceBuffer<T> out(n + offset);
  std::vector<float> padded(offset, 0.0f);
  padded.insert(padded.end(), x.begin(), x.end());
  in.upload(padded);
  cast(out.get() + offset, in.get() + offset, static_cast<long>(n), nullptr);
  cast(back.get() + offset, out.get() + offset, static_cast<long>(n), nullptr);
  const std::vector<T> got = out.download();
  const std::vector<float> got_back = back.download();
  for (std::size_t i = 0; i < n; ++i) {
    const T want = dtype_from_float<T>(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(dtype_to_float(got[offset + i]))) << i;
      EXPECT_TRUE(std::isnan(got_back[offset + i])) << i;
      continue;
    }
    ASSERT_EQ(bits(got[offset + i]), bits(want)) << "element " << i << " = " << x[i];
    ASSERT_EQ(got_back[offset + i], dtype_to_float(want)) << "element " << i;
    const float emulated =
        std::is_same_v<T, __half> ? cpu::round_to_fp16(x[i]) : cpu::round_to_bf16(x[i]);
    ASSERT_EQ(got_back[offset + i], emulated) << "element " << i << " = " << x[i];
  }
}

TEST(CudaCast, Bf16MatchesHostRoundingVectorised) {
  for (std::size_t n : {1, 7, 8, 1000, 4099}) check_round_trip<__nv_bfloat16>(n, 0);
}

TEST(CudaCast, Bf16MatchesHostRoundingUnaligned) { check_round_trip<__nv_bfloat16>(1001, 1); }

TEST(CudaCast, Fp16MatchesHostRoundingVectorised) {
  for (std::size_t n : {1, 7, 8, 1000, 4099}) check_round_trip<__half>(n, 0);
}

TEST(CudaCast, Fp16MatchesHostRoundingUnaligned) { check_round_trip<__half>(1001, 3); }

}  // namespace
}  // namespace strata::cuda
