// Residual add and bias gradient against model/kernels/cpu/residual.h.
#include <gtest/gtest.h>

#include "model/kernels/cpu/residual.h"
#include "model/kernels/cuda/residual.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaResidual : public ::testing::Test {
 protected:
  DeviceArena arena{16 << 20};
};
TYPED_TEST_SUITE(CudaResidual, ComputeDtypes, DtypeName);

struct Shape {
  int N, C;
};
// Vectorised (C a multiple of 8), element-by-element (C = 7, 100 for bf16) and multi-chunk (N >
// 256).
const Shape kShapes[] = {{1, 8}, {37, 100}, {300, 768}, {513, 7}};

TYPED_TEST(CudaResidual, ForwardMatchesCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> x = rounded<T>(random_floats(n, rng));
    const std::vector<float> y = rounded<T>(random_floats(n, rng));
    const std::vector<float> bias = rounded<T>(random_floats(s.C, rng));
    std::vector<float> want(n);
    cpu::residual_bias_forward(want.data(), x.data(), y.data(), bias.data(), s.N, s.C);
    DeviceBuffer<T> dx(to_dtype<T>(x)), dy(to_dtype<T>(y)), db(to_dtype<T>(bias)), out(n);
    residual_bias_forward(out.get(), dx.get(), dy.get(), db.get(), s.N, s.C, nullptr);
    EXPECT_LT(relative_error(to_floats(out.download()), want), tolerance<T>()) << s.N << "x" << s.C;
  }
}

TYPED_TEST(CudaResidual, BiasBackwardAccumulatesDeterministically) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> dout = rounded<T>(random_floats(n, rng));
    const std::vector<float> initial = random_floats(s.C, rng);
    std::vector<float> want = initial;
    cpu::bias_backward(want.data(), dout.data(), s.N, s.C);
    DeviceBuffer<T> d(to_dtype<T>(dout));
    DeviceBuffer<float> first(initial), second(initial);
    bias_backward(first.get(), d.get(), s.N, s.C, this->arena, nullptr);
    bias_backward(second.get(), d.get(), s.N, s.C, this->arena, nullptr);
    const std::vector<float> got = first.download();
    EXPECT_LT(relative_error(got, want), kFp32Tolerance) << s.N << "x" << s.C;
    EXPECT_EQ(got, second.download());
    EXPECT_EQ(this->arena.used(), 0u);  // scratch given back
  }
}

}  // namespace
}  // namespace strata::cuda
