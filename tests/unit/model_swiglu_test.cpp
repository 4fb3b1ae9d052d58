// SwiGLU (model/kernels/cpu/swiglu.h): the forward against the textbook formula in double, the
// backward against central finite differences of the forward, in place as out of place, and the
// far tails of the gate finite and at their limits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "model/kernels/cpu/swiglu.h"
#include "tests/support/finite_differences.h"

namespace strata::cpu {
namespace {

using testing::dot;
using testing::expect_matches_finite_differences;
using testing::random_vector;

// silu(g)·u as written, in double: g / (1 + e^(−g)) is accurate for the moderate g used here.
double naive_swiglu(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

template <class T>
std::vector<T> cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// h (N, 2F) with gates of standard deviation 3 (well into both tails of σ) and up values of 1.
std::vector<double> random_h(int N, int F, std::mt19937_64& rng) {
  std::vector<double> h(2L * N * F);
  const std::vector<double> g = random_vector(static_cast<std::size_t>(N) * F, rng, 3.0);
  const std::vector<double> u = random_vector(static_cast<std::size_t>(N) * F, rng, 1.0);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      h[2L * n * F + f] = g[static_cast<std::size_t>(n) * F + f];
      h[2L * n * F + F + f] = u[static_cast<std::size_t>(n) * F + f];
    }
  return h;
}

// Every element within `relative` of the formula: nothing in the kernel cancels, so the bound is
// relative element by element (double: a few ulp; float: exp_approx's ~2 ulp and four roundings).
template <class T>
void expect_forward_matches_formula(double relative) {
  std::mt19937_64 rng(1);
  for (const auto& [N, F] : {std::pair{1, 1}, std::pair{3, 7}, std::pair{4, 32}}) {
    const std::vector<double> h = random_h(N, F, rng);
    const std::vector<T> h_t = cast<T>(h);
    std::vector<T> out(static_cast<std::size_t>(N) * F);
    swiglu_forward(out.data(), h_t.data(), N, F);
    for (int n = 0; n < N; ++n)
      for (int f = 0; f < F; ++f) {
        const double want =
            naive_swiglu(static_cast<T>(h[2L * n * F + f]), static_cast<T>(h[2L * n * F + F + f]));
        EXPECT_NEAR(out[static_cast<std::size_t>(n) * F + f], want, relative * std::fabs(want))
            << N << "x" << F << " at " << n << ", " << f;
      }
  }
}

TEST(Swiglu, ForwardMatchesFormulaInDouble) { expect_forward_matches_formula<double>(1e-14); }
TEST(Swiglu, ForwardMatchesFormulaInFloat) { expect_forward_matches_formula<float>(1e-6); }

// L = Σ probe ⊙ swiglu(h), so dL/dh is the backward of dout = probe.
TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  const int N = 3, F = 5;
  std::vector<double> h = random_h(N, F, rng);
  const std::vector<double> probe = random_vector(static_cast<std::size_t>(N) * F, rng);
  std::vector<double> out(probe.size()), dh(h.size());
  auto loss = [&] {
    swiglu_forward(out.data(), h.data(), N, F);
    return dot(out, probe);
  };
  swiglu_backward(dh.data(), probe.data(), h.data(), N, F);
  expect_matches_finite_differences(h, dh, loss, "h");
}

// The float kernel against the double one, and dh written over h giving the same bits as a
// separate dh (the written values: dh starts full of garbage, nothing is accumulated).
TEST(Swiglu, FloatBackwardMatchesDoubleAndRunsInPlace) {
  std::mt19937_64 rng(3);
  const int N = 4, F = 24;
  const std::vector<double> h = random_h(N, F, rng);
  const std::vector<double> dout = random_vector(static_cast<std::size_t>(N) * F, rng);
  std::vector<double> want(h.size());
  swiglu_backward(want.data(), dout.data(), h.data(), N, F);

  const std::vector<float> h_f = cast<float>(h), dout_f = cast<float>(dout);
  std::vector<float> dh(h.size(), std::numeric_limits<float>::quiet_NaN());
  swiglu_backward(dh.data(), dout_f.data(), h_f.data(), N, F);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const long g_at = 2L * n * F + f, u_at = g_at + F;
      // dg = dout·u·σ·(1 + g·(1 − σ)) cancels where silu' crosses 0 (g ≈ −1.28): bound it by
      // the size of its terms, not by its own.
      const double scale = std::fabs(dout[n * F + f] * h[u_at]) * (1 + std::fabs(h[g_at]));
      EXPECT_NEAR(dh[g_at], want[g_at], 1e-6 * scale) << n << ", " << f;
      EXPECT_NEAR(dh[u_at], want[u_at], 1e-6 * std::fabs(want[u_at])) << n << ", " << f;
    }

  std::vector<float> in_place = h_f;
  swiglu_backward(in_place.data(), dout_f.data(), in_place.data(), N, F);
  EXPECT_EQ(in_place, dh);
}

// Gates far into both tails: finite, and at the limits silu(g) → g, silu'(g) → 1 for g ≫ 0 and
// silu(g), silu'(g) → 0 for g ≪ 0 (|x| ≥ 80 puts e^(−|x|) below 2e-35).
template <class T>
void expect_far_tails_at_their_limits() {
  const T u = T(0.5), dout = T(1);
  for (const T g_abs : {T(80), T(88), T(100), T(1000), T(1e30), T(3e38)}) {
    for (const T g : {g_abs, -g_abs}) {
      const std::vector<T> h = {g, u};
      std::vector<T> out(1), dh(2);
      swiglu_forward(out.data(), h.data(), 1, 1);
      swiglu_backward(dh.data(), &dout, h.data(), 1, 1);
      const T dg = dh[0], du = dh[1];
      ASSERT_TRUE(std::isfinite(out[0]) && std::isfinite(dg) && std::isfinite(du)) << g;
      if (g > 0) {
        EXPECT_EQ(out[0], g * u) << g;
        EXPECT_EQ(dg, dout * u) << g;
        EXPECT_EQ(du, dout * g) << g;
      } else {
        EXPECT_LE(std::fabs(out[0]), T(1e-30)) << g;
        EXPECT_LE(std::fabs(dg), T(1e-30)) << g;
        EXPECT_LE(std::fabs(du), T(1e-30)) << g;
      }
    }
  }
}

TEST(Swiglu, FarTailsAreFiniteAndAtTheirLimitsInFloat) {
  expect_far_tails_at_their_limits<float>();
}
TEST(Swiglu, FarTailsAreFiniteAndAtTheirLimitsInDouble) {
  expect_far_tails_at_their_limits<double>();
}

// An overflow upstream (an inf or NaN gate) stays non-finite, for the loss scaler to see.
TEST(Swiglu, NonFiniteGatesGiveNonFiniteResults) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float dout = 1.0f;
  for (const float g : {nan, inf, -inf}) {
    const std::vector<float> h = {g, 0.5f};
    float out = 0;
    std::vector<float> dh(2);
    swiglu_forward(&out, h.data(), 1, 1);
    swiglu_backward(dh.data(), &dout, h.data(), 1, 1);
    EXPECT_FALSE(std::isfinite(out)) << g;    // +inf·u, or NaN from (−inf)·0
    EXPECT_FALSE(std::isfinite(dh[0])) << g;  // dg: NaN from ±inf·0
    EXPECT_FALSE(std::isfinite(dh[1])) << g;  // du
  }
}

}  // namespace
}  // namespace strata::cpu
