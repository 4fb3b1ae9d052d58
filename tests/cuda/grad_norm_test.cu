// Gradient norm, overflow flag and the clip/unscale factor against cpu::sum_of_squares and the
// formula of train/optimizer/optimizer.cpp clip_factor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kernels/cpu/adamw.h"
#include "model/kernels/cuda/grad_norm.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

// Σ x² as near exact as the test needs: long double partial sums of 1024 terms, then their sum in
// long double (relative error far below 1e-12 at 4e7 terms).
double exact_sum_of_squares(const std::vector<float>& values) {
  long double total = 0;
  for (std::size_t begin = 0; begin < values.size(); begin += 1024) {
    long double part = 0;
    const std::size_t end = std::min(values.size(), begin + 1024);
    for (std::size_t i = begin; i < end; ++i)
      part += static_cast<long double>(values[i]) * static_cast<long double>(values[i]);
    total += part;
  }
  return static_cast<double>(total);
}

TEST(CudaGradNorm, SumOfSquaresMatchesCpuAndIsReproducible) {
  auto rng = test_rng();
  DeviceArena arena(1 << 20);
  for (long n : {0L, 1L, 1000L, (1L << 20) + 3, 40000000L}) {
    const std::vector<float> values = random_floats(n, rng, -3.0f, 3.0f);
    DeviceBuffer<float> d_values(values);
    DeviceBuffer<double> first(1), second(1);
    sum_of_squares(first.get(), d_values.get(), n, arena, nullptr);
    sum_of_squares(second.get(), d_values.get(), n, arena, nullptr);
    const double want = exact_sum_of_squares(values);
    const double got = first.download()[0];
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, want)) << n;
    // The CPU kernel's per-thread sequential double sums drift ~1e-12 relative over 4e7 terms.
    EXPECT_NEAR(cpu::sum_of_squares(values.data(), n), want, 1e-10 * std::max(1.0, want)) << n;
    EXPECT_EQ(got, second.download()[0]) << n;
  }
}

template <class T>
class CudaNonFinite : public ::testing::Test {};
TYPED_TEST_SUITE(CudaNonFinite, ComputeDtypes, DtypeName);

TYPED_TEST(CudaNonFinite, FlagsInfAndNaNAnywhere) {
  using T = TypeParam;
  auto rng = test_rng();
  const long n = 100003;
  const std::vector<float> clean = random_floats(n, rng);
  DeviceBuffer<int> flag(1);
  DeviceBuffer<T> values(to_dtype<T>(clean));
  any_nonfinite(flag.get(), values.get(), n, false, nullptr);
  EXPECT_EQ(flag.download()[0], 0);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (long at : {0L, n / 2, n - 1}) {
      std::vector<float> dirty = clean;
      dirty[at] = bad;
      values.upload(to_dtype<T>(dirty));
      any_nonfinite(flag.get(), values.get(), n, false, nullptr);
      EXPECT_EQ(flag.download()[0], 1) << bad << " at " << at;
    }
  // accumulate keeps an earlier 1; a fresh check of clean values clears it.
  values.upload(to_dtype<T>(clean));
  any_nonfinite(flag.get(), values.get(), n, true, nullptr);
  EXPECT_EQ(flag.download()[0], 1);
  any_nonfinite(flag.get(), values.get(), n, false, nullptr);
  EXPECT_EQ(flag.download()[0], 0);
}

TEST(CudaGradNorm, ScaleFromNormUnscalesAndClips) {
  struct Case {
    double sum_of_squares;
    float inv_loss_scale, max_norm;
    float want;
  };
  // norm = √sum · inv_loss_scale; clip = max_norm / norm when above.
  const Case cases[] = {{4.0, 1.0f, 1.0f, 0.5f},
                        {0.25, 1.0f, 1.0f, 1.0f},
                        {4.0 * 65536.0 * 65536.0, 1.0f / 65536, 1.0f, 0.5f / 65536},
                        {100.0, 1.0f, 0.0f, 1.0f}};
  DeviceBuffer<double> sum(1);
  DeviceBuffer<float> scale(1);
  for (const Case c : cases) {
    sum.upload({c.sum_of_squares});
    gradient_scale_from_norm(scale.get(), sum.get(), c.inv_loss_scale, c.max_norm, nullptr);
    EXPECT_FLOAT_EQ(scale.download()[0], c.want) << c.sum_of_squares;
  }
  for (double bad :
       {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    sum.upload({bad});
    gradient_scale_from_norm(scale.get(), sum.get(), 1.0f, 1.0f, nullptr);
    EXPECT_TRUE(std::isnan(scale.download()[0]));
  }
}

}  // namespace
}  // namespace strata::cuda
