// Standalone GELU against model/kernels/cpu/gelu.h.
#include <gtest/gtest.h>

#include <cmath>

#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cuda/gelu.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaGelu : public ::testing::Test {};
TYPED_TEST_SUITE(CudaGelu, ComputeDtypes, DtypeName);

TYPED_TEST(CudaGelu, ForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (long n : {1L, 1000L, 4097L}) {
    std::vector<float> x = rounded<T>(random_floats(n, rng, -6.0f, 6.0f));
    // The far tails: the clamped exponential keeps the gradient finite, never NaN. Not in the
    // one-element case, whose norm would then be the tail's alone: there gelu(-20) ≈ -3e-37,
    // which fp16 rounds to 0, a relative error of 1 for a correct kernel (the tail is checked
    // on its own below).
    if (n > 1) {
      x[0] = -20.0f;
      x[1] = 20.0f;
    }
    const std::vector<float> dy = rounded<T>(random_floats(n, rng));
    std::vector<float> want_y(n), want_dx(n);
    cpu::gelu_forward(want_y.data(), x.data(), n);
    cpu::gelu_backward(want_dx.data(), x.data(), dy.data(), n);

    DeviceBuffer<T> inp(to_dtype<T>(x)), dout(to_dtype<T>(dy)), out(n), dinp(n);
    gelu_forward(out.get(), inp.get(), n, nullptr);
    gelu_backward(dinp.get(), inp.get(), dout.get(), n, nullptr);
    EXPECT_LT(relative_error(to_floats(out.download()), want_y), tolerance<T>()) << n;
    EXPECT_LT(relative_error(to_floats(dinp.download()), want_dx), tolerance<T>()) << n;
    // In place (dinp aliasing dout), as the matmul fallback uses it.
    gelu_backward(dout.get(), inp.get(), dout.get(), n, nullptr);
    EXPECT_EQ(to_floats(dout.download()), to_floats(dinp.download()));
  }
}

// The far negative tail on its own: an output and a gradient within an absolute bound of 0
// (relative error means nothing there: the true values are below fp16's smallest subnormal).
TYPED_TEST(CudaGelu, FarTailIsFiniteAndNearZero) {
  using T = TypeParam;
  const std::vector<float> x = {-20.0f, -30.0f, -100.0f}, dy = {1.0f, -1.0f, 0.5f};
  const long n = static_cast<long>(x.size());
  DeviceBuffer<T> inp(to_dtype<T>(x)), dout(to_dtype<T>(dy)), out(n), dinp(n);
  gelu_forward(out.get(), inp.get(), n, nullptr);
  gelu_backward(dinp.get(), inp.get(), dout.get(), n, nullptr);
  for (float y : to_floats(out.download())) EXPECT_LE(std::fabs(y), 1e-6f);
  for (float g : to_floats(dinp.download())) EXPECT_LE(std::fabs(g), 1e-6f);
}

}  // namespace
}  // namespace strata::cuda
