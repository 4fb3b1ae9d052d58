// The CPU RMSNorm (model/kernels/cpu/rmsnorm.h): the forward against the formula written out here
// in double, the backward against central finite differences of the forward in double, the split
// backward's two halves against the fused backward bit for bit, the weight gradient independent of
// the thread count, and the fused residual form against the residual add, rounding, RMSNorm and
// rounding it replaces, bit for bit in every compute dtype.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "model/kernels/cpu/precision.h"
#include "model/kernels/cpu/residual.h"
#include "model/kernels/cpu/rmsnorm.h"
#include "tests/support/finite_differences.h"

namespace strata::cpu {
namespace {

using testing::dot;
using testing::expect_matches_finite_differences;
using testing::random_vector;

struct Shape {
  int N, C;
};
// C = 1, odd C, C below and past one vector of lanes and one 16-column slice of the weight half.
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 16}, {4, 33}, {9, 100}};
const double kEpsilons[] = {1e-5, 1e-6, 0.5};

// out = x / √(mean(x²) + eps) · w, row by row, in double.
void naive_rmsnorm(std::vector<double>& out, std::vector<double>& rstd,
                   const std::vector<double>& x, const std::vector<double>& w, int N, int C,
                   double eps) {
  for (int n = 0; n < N; ++n) {
    double mean_square = 0;
    for (int c = 0; c < C; ++c) mean_square += x[n * C + c] * x[n * C + c];
    mean_square /= C;
    rstd[n] = 1.0 / std::sqrt(mean_square + eps);
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * rstd[n] * w[c];
  }
}

template <class T, class U>
std::vector<T> cast(const std::vector<U>& x) {
  return std::vector<T>(x.begin(), x.end());
}

template <class T>
double max_relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  double error = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    error = std::max(error, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return error / scale;
}

template <class T>
class RmsNormForward : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RmsNormForward, Precisions);

// float: a few ulp of fp32 (the sum of C ≤ 100 squares and three products); double: the same in
// double's precision.
TYPED_TEST(RmsNormForward, MatchesTheFormula) {
  using T = TypeParam;
  const double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  std::mt19937_64 rng(1);
  for (const Shape s : kShapes) {
    for (const double eps : kEpsilons) {
      SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << " eps " << eps);
      const std::vector<double> x = random_vector(s.N * s.C, rng, 2.0), w = random_vector(s.C, rng);
      const std::vector<T> x_t = cast<T>(x), w_t = cast<T>(w);
      std::vector<double> want(s.N * s.C), want_rstd(s.N);
      naive_rmsnorm(want, want_rstd, cast<double>(x_t), cast<double>(w_t), s.N, s.C, eps);
      std::vector<T> out(s.N * s.C), rstd(s.N);
      rmsnorm_forward(out.data(), rstd.data(), x_t.data(), w_t.data(), s.N, s.C, eps);
      EXPECT_LT(max_relative_error(out, want), tolerance);
      EXPECT_LT(max_relative_error(rstd, want_rstd), tolerance);
    }
  }
}

// A row of zeros normalises to zeros with rstd = 1/√eps (eps keeps it finite).
TEST(RmsNorm, ZeroRowIsFinite) {
  const int C = 8;
  const std::vector<float> x(C, 0.0f), w(C, 1.0f);
  std::vector<float> out(C, 1.0f), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, C, 1e-6);
  EXPECT_FLOAT_EQ(rstd[0], 1000.0f);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// The loss Σ probe ⊙ RMSNorm(x; w): dL/dout = probe.
TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  for (const Shape s : kShapes) {
    for (const double eps : kEpsilons) {
      SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << " eps " << eps);
      std::vector<double> x = random_vector(s.N * s.C, rng, 2.0), w = random_vector(s.C, rng);
      const std::vector<double> probe = random_vector(s.N * s.C, rng);
      std::vector<double> out(s.N * s.C), rstd(s.N);
      auto loss = [&] {
        rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), s.N, s.C, eps);
        return dot(out, probe);
      };
      loss();
      // Accumulated into: start from values that are not zero and take them off afterwards.
      std::vector<double> dx(s.N * s.C, 0.25), dw(s.C, -0.5);
      rmsnorm_backward(dx.data(), dw.data(), probe.data(), x.data(), w.data(), rstd.data(), s.N,
                       s.C);
      for (double& v : dx) v -= 0.25;
      for (double& v : dw) v += 0.5;
      expect_matches_finite_differences(x, dx, loss, "input");
      expect_matches_finite_differences(w, dw, loss, "weight");
    }
  }
}

// The split backward adds what the fused one does, bit for bit, and the weight half's column sums
// do not depend on how many threads run them.
TEST(RmsNorm, SplitBackwardIsTheFusedBackward) {
  std::mt19937_64 rng(3);
  const int N = 67, C = 200;
  const std::vector<float> x = cast<float>(random_vector(N * C, rng, 2.0)),
                           w = cast<float>(random_vector(C, rng)),
                           dout = cast<float>(random_vector(N * C, rng)),
                           dx0 = cast<float>(random_vector(N * C, rng)),
                           dw0 = cast<float>(random_vector(C, rng));
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);

  std::vector<float> fused_dx = dx0, fused_dw = dw0;
  rmsnorm_backward(fused_dx.data(), fused_dw.data(), dout.data(), x.data(), w.data(), rstd.data(),
                   N, C);
  std::vector<float> split_dx = dx0, split_dw = dw0;
  rmsnorm_backward_input(split_dx.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_EQ(split_dw, dw0);  // the input half leaves the weight gradient alone
  rmsnorm_backward_weight(split_dw.data(), dout.data(), x.data(), rstd.data(), N, C);
  EXPECT_EQ(split_dx, fused_dx);
  EXPECT_EQ(split_dw, fused_dw);

  const int threads = omp_get_max_threads();
  omp_set_num_threads(threads == 1 ? 3 : 1);
  std::vector<float> other_dw = dw0;
  rmsnorm_backward_weight(other_dw.data(), dout.data(), x.data(), rstd.data(), N, C);
  omp_set_num_threads(threads);
  EXPECT_EQ(other_dw, fused_dw);
}

// residual_rmsnorm_forward is residual_bias_forward, round_to_dtype, rmsnorm_forward and
// round_to_dtype, bit for bit, with and without the branch's bias, and in place (sum_out aliasing
// residual).
TEST(RmsNorm, FusedResidualIsTheResidualAddThenTheRmsNorm) {
  std::mt19937_64 rng(4);
  const int N = 37, C = 72;  // C not a multiple of the vector width
  const std::vector<float> residual = cast<float>(random_vector(N * C, rng)),
                           y = cast<float>(random_vector(N * C, rng)),
                           y_bias = cast<float>(random_vector(C, rng)),
                           w = cast<float>(random_vector(C, rng));
  const double eps = 1e-6;
  for (const ComputeDtype dtype : {ComputeDtype::fp32, ComputeDtype::bf16, ComputeDtype::fp16}) {
    for (const float* bias : {y_bias.data(), static_cast<const float*>(nullptr)}) {
      SCOPED_TRACE(::testing::Message() << compute_dtype_name(dtype)
                                        << (bias != nullptr ? " with" : " without") << " bias");
      std::vector<float> sum(N * C), out(N * C), rstd(N);
      residual_rmsnorm_forward(sum.data(), out.data(), rstd.data(), residual.data(), y.data(), bias,
                               w.data(), N, C, eps, dtype);
      std::vector<float> want_sum(N * C), want_out(N * C), want_rstd(N);
      residual_bias_forward(want_sum.data(), residual.data(), y.data(), bias, N, C);
      round_to_dtype(want_sum.data(), N * C, dtype);
      rmsnorm_forward(want_out.data(), want_rstd.data(), want_sum.data(), w.data(), N, C, eps);
      round_to_dtype(want_out.data(), N * C, dtype);
      EXPECT_EQ(sum, want_sum);
      EXPECT_EQ(out, want_out);
      EXPECT_EQ(rstd, want_rstd);
      if (dtype == ComputeDtype::bf16) {  // the fused kernel did round
        for (float v : out) ASSERT_EQ(v, round_to_bf16(v));
      }

      std::vector<float> stream = residual;  // the residual stream updated in place
      residual_rmsnorm_forward(stream.data(), out.data(), rstd.data(), stream.data(), y.data(),
                               bias, w.data(), N, C, eps, dtype);
      EXPECT_EQ(stream, want_sum);
      EXPECT_EQ(out, want_out);
    }
  }
}

}  // namespace
}  // namespace strata::cpu
