// RoPE (model/kernels/cpu/rope.h) against a naive double-precision rotary embedding written here,
// at ordinary and at long-context positions; the rotate-half pairing on a hand-computed head; the
// layout (untouched columns, positions per sequence, grouped-query heads in one call or per
// tensor); the backward pass as the adjoint of the forward, checked by inner products and by
// central finite differences; and each pair's norm kept.
//
// Tolerances, per element, relative to |x_i| + |x_{i+hs/2}| of its pair:
//   float  1e-6: the reduced angle rounded to fp32 (≤ 1.2e-7 rad), sinf/cosf (< 1 ulp) and the
//          rotation's two products and sum (≤ 1.5 ulp) stay below 4e-7, whatever the position.
//   double 1e-15·(8 + largest position): p·θ is rounded to double on both sides (2^-53 of it),
//          the sines and the rotation add a few ulps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/rope.h"

namespace strata {
namespace {

// The rotary embedding as the formula reads, in double: θ_i = theta^(−2i/hs), angle p·θ_i, the
// sine and cosine of the unreduced angle, element i paired with i + hs/2. `inverse` turns by
// −angle.
std::vector<double> naive_rope(const std::vector<double>& x, const RopeLayout& l, bool inverse) {
  std::vector<double> y = x;
  const int half = l.head_size / 2;
  for (int b = 0; b < l.B; ++b)
    for (int t = 0; t < l.T; ++t)
      for (int h = 0; h < l.heads; ++h)
        for (int i = 0; i < half; ++i) {
          const double angle = (t + l.position_offset) * std::pow(l.theta, -2.0 * i / l.head_size);
          const double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
          const long first =
              (static_cast<long>(b) * l.T + t) * l.row_stride + l.column + h * l.head_size + i;
          const long second = first + half;
          y[first] = x[first] * c - x[second] * s;
          y[second] = x[second] * c + x[first] * s;
        }
  return y;
}

std::vector<double> random_values(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> x(n);
  for (double& v : x) v = dist(rng);
  return x;
}

std::size_t elements(const RopeLayout& l) {
  return static_cast<std::size_t>(l.B) * l.T * l.row_stride;
}

template <class T, class U>
std::vector<T> as(const std::vector<U>& x) {
  return std::vector<T>(x.begin(), x.end());
}

template <class T>
double tolerance(const RopeLayout& l) {
  return std::is_same_v<T, float> ? 1e-6 : 1e-15 * (8 + l.position_offset + l.T);
}

// Every element of `got` against `want` within tolerance · (|x_i| + |x_{i+hs/2}|) of the element's
// pair in `x` (and exactly equal outside the rotated heads, where the bound is 0).
void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::vector<double>& x, const RopeLayout& l, double tolerance) {
  std::vector<double> scale(x.size(), 0.0);
  const int half = l.head_size / 2;
  for (long r = 0; r < static_cast<long>(l.B) * l.T; ++r)
    for (int h = 0; h < l.heads; ++h)
      for (int i = 0; i < half; ++i) {
        const long first = r * l.row_stride + l.column + h * l.head_size + i;
        scale[first] = scale[first + half] = std::fabs(x[first]) + std::fabs(x[first + half]);
      }
  for (std::size_t j = 0; j < got.size(); ++j)
    ASSERT_LE(std::fabs(got[j] - want[j]), tolerance * scale[j]) << "element " << j;
}

// Multi-head qkv, grouped-query qkv, a head span inside wider rows, odd T, long contexts (to the
// 10^7 of model/kernels/rope.h's bound, with hs = 96: θ_i's exponent 2i/96 is not exact).
std::vector<RopeLayout> layouts() {
  return {rope_qk_layout(2, 5, 4, 4, 16, 0, 10000.0), rope_qk_layout(3, 7, 4, 2, 8, 3, 500000.0),
          RopeLayout{2, 3, 40, 6, 3, 10, 17, 10000.0},
          rope_qk_layout(1, 4, 2, 1, 64, 1000000, 10000.0),
          rope_qk_layout(1, 2, 1, 1, 96, 9999998, 500000.0)};
}

template <class T>
class Rope : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Rope, Types);

TYPED_TEST(Rope, ForwardAndBackwardMatchTheNaiveFormula) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (const RopeLayout& l : layouts()) {
    const std::vector<double> x = as<double>(as<T>(random_values(elements(l), rng)));
    for (bool backward : {false, true}) {
      std::vector<T> y = as<T>(x);
      if (backward)
        cpu::rope_backward(y.data(), l);
      else
        cpu::rope_forward(y.data(), l);
      expect_close(as<double>(y), naive_rope(x, l, backward), x, l, tolerance<T>(l));
    }
  }
}

// hs = 4, theta = 10000, position 1: θ = (1, 0.01); element 0 pairs with 2, 1 with 3.
TEST(RopePairing, RotatesHalfAsHuggingFaceLlama) {
  const RopeLayout l{1, 2, 4, 0, 1, 4, 0, 10000.0};
  std::vector<double> x = {9, 9, 9, 9, 1, 0, 0, 2};  // row 0 (position 0) stays as it is
  cpu::rope_forward(x.data(), l);
  const std::vector<double> want = {
      9, 9, 9, 9, std::cos(1.0), -2 * std::sin(0.01), std::sin(1.0), 2 * std::cos(0.01)};
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(x[j], want[j], 1e-15) << j;
}

TYPED_TEST(Rope, LeavesOtherColumnsAndGivesEverySequenceTheSamePositions) {
  using T = TypeParam;
  std::mt19937_64 rng(12);
  const RopeLayout l{3, 4, 30, 5, 2, 8, 2, 10000.0};
  std::vector<T> x = as<T>(random_values(elements(l), rng));
  // Every sequence holds the same rows: after the call they must still be equal.
  for (int b = 1; b < l.B; ++b)
    std::copy_n(x.begin(), l.T * l.row_stride, x.begin() + b * l.T * l.row_stride);
  const std::vector<T> before = x;
  cpu::rope_forward(x.data(), l);
  for (long r = 0; r < static_cast<long>(l.B) * l.T; ++r)
    for (int c = 0; c < l.row_stride; ++c) {
      const std::size_t j = r * l.row_stride + c;
      if (c < l.column || c >= l.column + l.heads * l.head_size) {
        EXPECT_EQ(x[j], before[j]);
      }
      if (r >= l.T) {
        EXPECT_EQ(x[j], x[j - l.T * l.row_stride]);
      }
    }
  EXPECT_NE(x[l.column + l.row_stride], before[l.column + l.row_stride]);  // position 3 turned
}

// [q: 4 heads | k: 2 heads | v: 2 heads]: the one call over q and k is the two per-tensor calls.
TYPED_TEST(Rope, GroupedQueryHeadsInOneCallOrPerTensor) {
  using T = TypeParam;
  std::mt19937_64 rng(13);
  const int NH = 4, KV = 2, hs = 16;
  const RopeLayout qk = rope_qk_layout(2, 6, NH, KV, hs, 5, 500000.0);
  std::vector<T> once = as<T>(random_values(elements(qk), rng));
  std::vector<T> apart = once;
  cpu::rope_forward(once.data(), qk);
  RopeLayout q = qk, k = qk;
  q.heads = NH;
  k.column = NH * hs;
  k.heads = KV;
  cpu::rope_forward(apart.data(), q);
  cpu::rope_forward(apart.data(), k);
  EXPECT_EQ(once, apart);
}

TYPED_TEST(Rope, KeepsEachPairsNorm) {
  using T = TypeParam;
  std::mt19937_64 rng(14);
  for (const RopeLayout& l : layouts()) {
    const std::vector<T> x = as<T>(random_values(elements(l), rng));
    std::vector<T> y = x;
    cpu::rope_forward(y.data(), l);
    const int half = l.head_size / 2;
    for (long r = 0; r < static_cast<long>(l.B) * l.T; ++r)
      for (int h = 0; h < l.heads; ++h)
        for (int i = 0; i < half; ++i) {
          const long a = r * l.row_stride + l.column + h * l.head_size + i, b = a + half;
          const double before = std::hypot(double(x[a]), double(x[b]));
          const double after = std::hypot(double(y[a]), double(y[b]));
          ASSERT_NEAR(after, before, 2 * tolerance<T>(l) * before) << r << " " << h << " " << i;
        }
  }
}

// <R x, y> = <x, Rᵀ y>, and rope_backward undoes rope_forward.
TYPED_TEST(Rope, BackwardIsTheAdjointAndTheInverse) {
  using T = TypeParam;
  std::mt19937_64 rng(15);
  for (const RopeLayout& l : layouts()) {
    const std::vector<T> x = as<T>(random_values(elements(l), rng));
    const std::vector<T> y = as<T>(random_values(elements(l), rng));
    std::vector<T> rx = x, rty = y;
    cpu::rope_forward(rx.data(), l);
    cpu::rope_backward(rty.data(), l);
    double left = 0, right = 0, magnitude = 0;
    for (std::size_t j = 0; j < x.size(); ++j) {
      left += double(rx[j]) * y[j];
      right += double(x[j]) * rty[j];
      magnitude += std::fabs(double(x[j]) * y[j]);
    }
    EXPECT_NEAR(left, right, 4 * tolerance<T>(l) * magnitude);
    std::vector<T> back = rx;
    cpu::rope_backward(back.data(), l);
    expect_close(as<double>(back), as<double>(x), as<double>(x), l, 2 * tolerance<T>(l));
  }
}

// L(x) = <w, rope_forward(x)>: dL/dx = rope_backward(w), against central differences of L at every
// element (L is linear, so the difference quotient is exact up to rounding: |L|·2^-53 / h).
TEST(RopeGradient, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(16);
  const RopeLayout l = rope_qk_layout(2, 3, 2, 1, 8, 7, 10000.0);
  const std::vector<double> x = random_values(elements(l), rng);
  const std::vector<double> w = random_values(elements(l), rng);
  auto loss = [&](std::vector<double> v) {
    cpu::rope_forward(v.data(), l);
    double sum = 0;
    for (std::size_t j = 0; j < v.size(); ++j) sum += w[j] * v[j];
    return sum;
  };
  std::vector<double> grad = w;
  cpu::rope_backward(grad.data(), l);
  const double h = 1e-3;
  for (std::size_t j = 0; j < x.size(); ++j) {
    std::vector<double> plus = x, minus = x;
    plus[j] += h;
    minus[j] -= h;
    EXPECT_NEAR((loss(plus) - loss(minus)) / (2 * h), grad[j], 1e-10) << "element " << j;
  }
}

TEST(RopeLayoutCheck, RejectsWhatIsNotARotation) {
  std::vector<float> x(64);
  EXPECT_THROW(cpu::rope_forward(x.data(), RopeLayout{1, 1, 64, 0, 2, 7, 0, 10000.0}), Error);
  EXPECT_THROW(cpu::rope_forward(x.data(), RopeLayout{1, 1, 64, 8, 2, 32, 0, 10000.0}), Error);
  EXPECT_THROW(cpu::rope_forward(x.data(), RopeLayout{1, 1, 64, 0, 2, 8, -1, 10000.0}), Error);
  EXPECT_THROW(cpu::rope_backward(x.data(), RopeLayout{1, 1, 64, 0, 2, 8, 0, 0.0}), Error);
}

}  // namespace
}  // namespace strata
