// SwiGLU forward and backward against model/kernels/cpu/swiglu.h, on inputs rounded to T; the
// reference's fp32 results are compared unrounded. Tolerances (relative error norm, see
// cuda_test_support.h): fp32 1e-5 (the same arithmetic, expf against the CPU's exp_approx: a few
// ulp), bf16 1e-2 and fp16 5e-3 (one rounding of each output to T).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/kernels/cpu/swiglu.h"
#include "model/kernels/cuda/swiglu.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaSwiglu : public ::testing::Test {};
TYPED_TEST_SUITE(CudaSwiglu, ComputeDtypes, DtypeName);

struct Shape {
  int N, F;
};
// F a multiple of 8 takes the vector kernels; 1, 100 and 1375 the element-by-element ones.
const Shape kShapes[] = {{1, 1}, {1, 8}, {37, 100}, {64, 1024}, {5, 1375}, {300, 64}};

TYPED_TEST(CudaSwiglu, ForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t pairs = static_cast<std::size_t>(s.N) * s.F;
    // Gates in [−8, 8] cover σ's saturated tails; up values and output gradients in [−2, 2].
    std::vector<float> h(2 * pairs);
    const std::vector<float> g = random_floats(pairs, rng, -8.0f, 8.0f);
    const std::vector<float> u = random_floats(pairs, rng, -2.0f, 2.0f);
    for (int n = 0; n < s.N; ++n)
      for (int f = 0; f < s.F; ++f) {
        h[2L * n * s.F + f] = g[static_cast<std::size_t>(n) * s.F + f];
        h[2L * n * s.F + s.F + f] = u[static_cast<std::size_t>(n) * s.F + f];
      }
    h = rounded<T>(h);
    const std::vector<float> dy = rounded<T>(random_floats(pairs, rng, -2.0f, 2.0f));
    std::vector<float> want_out(pairs), want_dh(2 * pairs);
    cpu::swiglu_forward(want_out.data(), h.data(), s.N, s.F);
    cpu::swiglu_backward(want_dh.data(), dy.data(), h.data(), s.N, s.F);

    DeviceBuffer<T> d_h(to_dtype<T>(h)), d_dout(to_dtype<T>(dy)), d_out(pairs), d_dh(2 * pairs);
    swiglu_forward(d_out.get(), d_h.get(), s.N, s.F, nullptr);
    swiglu_backward(d_dh.get(), d_dout.get(), d_h.get(), s.N, s.F, nullptr);
    const std::vector<float> dh = to_floats(d_dh.download());
    EXPECT_LT(relative_error(to_floats(d_out.download()), want_out), tolerance<T>())
        << s.N << "x" << s.F;
    EXPECT_LT(relative_error(dh, want_dh), tolerance<T>()) << s.N << "x" << s.F;

    // In place, dh over h: the same values.
    swiglu_backward(d_h.get(), d_dout.get(), d_h.get(), s.N, s.F, nullptr);
    EXPECT_EQ(to_floats(d_h.download()), dh) << s.N << "x" << s.F;
  }
}

// Pointers off the vectors' alignment by one element take the element-by-element kernels, which
// give the same values as the vector ones.
TYPED_TEST(CudaSwiglu, UnalignedPointersMatchAligned) {
  using T = TypeParam;
  auto rng = test_rng();
  const int N = 9, F = 64;
  const std::size_t pairs = static_cast<std::size_t>(N) * F;
  const std::vector<float> h = rounded<T>(random_floats(2 * pairs + 1, rng, -8.0f, 8.0f));
  const std::vector<float> dy = rounded<T>(random_floats(pairs + 1, rng));
  DeviceBuffer<T> d_h(to_dtype<T>(h)), d_dout(to_dtype<T>(dy));
  DeviceBuffer<T> aligned_out(pairs + 1), unaligned_out(pairs + 1);
  DeviceBuffer<T> aligned_dh(2 * pairs + 1), unaligned_dh(2 * pairs + 1);
  swiglu_forward(aligned_out.get(), d_h.get(), N, F, nullptr);
  swiglu_forward(unaligned_out.get() + 1, d_h.get() + 1, N, F, nullptr);
  swiglu_backward(aligned_dh.get(), d_dout.get(), d_h.get(), N, F, nullptr);
  swiglu_backward(unaligned_dh.get() + 1, d_dout.get() + 1, d_h.get() + 1, N, F, nullptr);

  // The unaligned runs read h shifted by one element: compare with the CPU on that same shift.
  const std::vector<float> shifted_h(h.begin() + 1, h.end());
  const std::vector<float> shifted_dy(dy.begin() + 1, dy.end());
  std::vector<float> want_out(pairs), want_dh(2 * pairs);
  cpu::swiglu_forward(want_out.data(), shifted_h.data(), N, F);
  cpu::swiglu_backward(want_dh.data(), shifted_dy.data(), shifted_h.data(), N, F);
  const std::vector<float> out = to_floats(unaligned_out.download());
  const std::vector<float> dh = to_floats(unaligned_dh.download());
  EXPECT_LT(relative_error(std::vector<float>(out.begin() + 1, out.end()), want_out),
            tolerance<T>());
  EXPECT_LT(relative_error(std::vector<float>(dh.begin() + 1, dh.end()), want_dh), tolerance<T>());

  // And the aligned runs against the unshifted inputs.
  cpu::swiglu_forward(want_out.data(), h.data(), N, F);
  cpu::swiglu_backward(want_dh.data(), dy.data(), h.data(), N, F);
  const std::vector<float> out_a = to_floats(aligned_out.download());
  const std::vector<float> dh_a = to_floats(aligned_dh.download());
  EXPECT_LT(relative_error(std::vector<float>(out_a.begin(), out_a.end() - 1), want_out),
            tolerance<T>());
  EXPECT_LT(relative_error(std::vector<float>(dh_a.begin(), dh_a.end() - 1), want_dh),
            tolerance<T>());
}

// Gates far into both tails, within every dtype's range (fp16's largest finite value is 65504):
// finite, with silu(g) = g and silu'(g) = 1 for g ≫ 0, and everything within 1e-6 of 0 for g ≪ 0.
TYPED_TEST(CudaSwiglu, FarTailsAreFiniteAndAtTheirLimits) {
  using T = TypeParam;
  const std::vector<float> gates =
      rounded<T>({80.0f, -80.0f, 100.0f, -100.0f, 1000.0f, -1000.0f, 30000.0f, -30000.0f});
  const int N = 1, F = static_cast<int>(gates.size());
  std::vector<float> h(gates);
  h.insert(h.end(), gates.size(), 0.5f);  // u = 0.5
  const std::vector<float> dy(gates.size(), 1.0f);
  DeviceBuffer<T> d_h(to_dtype<T>(h)), d_dout(to_dtype<T>(dy)), d_out(F), d_dh(2 * F);
  swiglu_forward(d_out.get(), d_h.get(), N, F, nullptr);
  swiglu_backward(d_dh.get(), d_dout.get(), d_h.get(), N, F, nullptr);
  const std::vector<float> out = to_floats(d_out.download());
  const std::vector<float> dh = to_floats(d_dh.download());
  for (int f = 0; f < F; ++f) {
    const float g = gates[f], dg = dh[f], du = dh[F + f];
    ASSERT_TRUE(std::isfinite(out[f]) && std::isfinite(dg) && std::isfinite(du)) << g;
    if (g > 0) {
      EXPECT_EQ(out[f], 0.5f * g) << g;  // exact: halving a value of T
      EXPECT_EQ(dg, 0.5f) << g;
      EXPECT_EQ(du, g) << g;
    } else {
      EXPECT_LE(std::fabs(out[f]), 1e-6f) << g;
      EXPECT_LE(std::fabs(dg), 1e-6f) << g;
      EXPECT_LE(std::fabs(du), 1e-6f) << g;
    }
  }
}

}  // namespace
}  // namespace strata::cuda
