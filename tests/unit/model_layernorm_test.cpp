// The CPU LayerNorm's two choices a model makes (model/kernels/cpu/layernorm.h): its eps (the
// caller's, model.norm_eps) and whether it has a bias (model.bias). The forward against the
// formula written out here in double for several eps, with and without a bias; a null bias as a
// zero bias, bit for bit, in the plain and the fused residual forms; the weight half without a
// bias gradient giving the same dweight; and the backward against central finite differences at a
// large eps, where a wrong eps in the gradient would show.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/precision.h"
#include "model/kernels/cpu/residual.h"
#include "tests/support/finite_differences.h"

namespace strata::cpu {
namespace {

using testing::dot;
using testing::expect_matches_finite_differences;
using testing::random_vector;

struct Shape {
  int N, C;
};
// C = 1 (var 0: out is bias, rstd 1/√eps), odd C, C below and past one vector of lanes.
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 16}, {4, 33}, {9, 100}};
// GPT-2's, a smaller one and one large enough to change every output visibly.
const float kEpsilons[] = {1e-5f, 1e-6f, 0.1f};

// out = (x − mean)/√(var + eps)·w (+ b), row by row, in double; b may be null.
void naive_layernorm(std::vector<double>& out, std::vector<double>& mean, std::vector<double>& rstd,
                     const std::vector<double>& x, const std::vector<double>& w, const double* b,
                     int N, int C, double eps) {
  for (int n = 0; n < N; ++n) {
    const double* row = x.data() + static_cast<long>(n) * C;
    double m = 0, var = 0;
    for (int c = 0; c < C; ++c) m += row[c];
    m /= C;
    for (int c = 0; c < C; ++c) var += (row[c] - m) * (row[c] - m);
    var /= C;
    mean[n] = m;
    rstd[n] = 1.0 / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c)
      out[n * C + c] = (row[c] - m) * rstd[n] * w[c] + (b != nullptr ? b[c] : 0.0);
  }
}

template <class To, class From>
std::vector<To> converted(const std::vector<From>& v) {
  return {v.begin(), v.end()};
}

// max |got − want| over max |want| (absolute where want is all zeros).
template <class T>
double relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  double error = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    error = std::max(error, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? error / scale : error;
}

template <class T>
class LayerNormForward : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LayerNormForward, Precisions);

// eps is the caller's, added in T: the formula with the same eps (as a double) to a few ulp of T.
// float at eps 1e-5f is the arithmetic of the kernel before eps became an argument (its constant,
// the double 1e-5 as a float, was 1e-5f).
TYPED_TEST(LayerNormForward, MatchesTheFormulaForEachEpsWithAndWithoutBias) {
  using T = TypeParam;
  const double tolerance = std::is_same_v<T, float> ? 4e-6 : 1e-13;
  std::mt19937_64 rng(1);
  for (const Shape s : kShapes) {
    for (const float eps : kEpsilons) {
      const std::vector<T> x = converted<T>(random_vector(s.N * s.C, rng, 2.0)),
                           w = converted<T>(random_vector(s.C, rng)),
                           b = converted<T>(random_vector(s.C, rng));
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << " eps " << eps
                                          << (with_bias ? " with" : " without") << " bias");
        const std::vector<double> b_double = converted<double>(b);
        std::vector<double> want(s.N * s.C), want_mean(s.N), want_rstd(s.N);
        naive_layernorm(want, want_mean, want_rstd, converted<double>(x), converted<double>(w),
                        with_bias ? b_double.data() : nullptr, s.N, s.C, eps);
        std::vector<T> out(s.N * s.C), mean(s.N), rstd(s.N);
        layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                          with_bias ? b.data() : nullptr, s.N, s.C, eps);
        EXPECT_LT(relative_error(out, want), tolerance);
        EXPECT_LT(relative_error(rstd, want_rstd), tolerance);
        for (int n = 0; n < s.N; ++n) EXPECT_NEAR(mean[n], want_mean[n], tolerance * 8);
      }
    }
  }
}

// A row ±1 has mean 0 and variance 1, so rstd = 1/√(1 + eps): eps moves it as the formula says.
TEST(LayerNorm, EpsIsTheCallers) {
  const int C = 4;
  const std::vector<float> x = {-1.0f, 1.0f, -1.0f, 1.0f}, w(C, 1.0f);
  for (const float eps : kEpsilons) {
    std::vector<float> out(C), mean(1), rstd(1);
    layernorm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, 1,
                             C, eps);
    EXPECT_EQ(mean[0], 0.0f);
    EXPECT_FLOAT_EQ(rstd[0], static_cast<float>(1.0 / std::sqrt(1.0 + eps))) << eps;
    EXPECT_FLOAT_EQ(out[1], rstd[0]) << eps;
  }
}

// A null bias is a zero bias, in float and double: the same outputs and statistics (compared with
// ==, which takes a product of exactly −0 without the bias and its +0 with the zero as equal).
TYPED_TEST(LayerNormForward, NullBiasIsAZeroBias) {
  using T = TypeParam;
  std::mt19937_64 rng(2);
  const int N = 13, C = 72;
  const std::vector<T> x = converted<T>(random_vector(N * C, rng, 2.0)),
                       w = converted<T>(random_vector(C, rng)), zeros(C, T(0));
  std::vector<T> out(N * C), mean(N), rstd(N), zero_out(N * C), zero_mean(N), zero_rstd(N);
  layernorm_forward<T>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C,
                       1e-5f);
  layernorm_forward(zero_out.data(), zero_mean.data(), zero_rstd.data(), x.data(), w.data(),
                    zeros.data(), N, C, 1e-5f);
  EXPECT_EQ(out, zero_out);
  EXPECT_EQ(mean, zero_mean);
  EXPECT_EQ(rstd, zero_rstd);
}

// The fused residual form without biases (y_bias and bias null) is residual_bias_forward without a
// bias, rounding, layernorm_forward without a bias and rounding, bit for bit, and is the same as
// zero biases; in every compute dtype, in place too.
TEST(LayerNorm, FusedResidualWithoutBiases) {
  std::mt19937_64 rng(3);
  const int N = 37, C = 72;
  const std::vector<float> residual = converted<float>(random_vector(N * C, rng)),
                           y = converted<float>(random_vector(N * C, rng)),
                           w = converted<float>(random_vector(C, rng)), zeros(C, 0.0f);
  const float eps = 1e-6f;
  for (const ComputeDtype dtype : {ComputeDtype::fp32, ComputeDtype::bf16, ComputeDtype::fp16}) {
    SCOPED_TRACE(compute_dtype_name(dtype));
    std::vector<float> sum(N * C), out(N * C), mean(N), rstd(N);
    residual_layernorm_forward<float>(sum.data(), out.data(), mean.data(), rstd.data(),
                                      residual.data(), y.data(), nullptr, w.data(), nullptr, N, C,
                                      eps, dtype);
    std::vector<float> want_sum(N * C), want_out(N * C), want_mean(N), want_rstd(N);
    residual_bias_forward<float>(want_sum.data(), residual.data(), y.data(), nullptr, N, C);
    round_to_dtype(want_sum.data(), N * C, dtype);
    layernorm_forward<float>(want_out.data(), want_mean.data(), want_rstd.data(), want_sum.data(),
                             w.data(), nullptr, N, C, eps);
    round_to_dtype(want_out.data(), N * C, dtype);
    EXPECT_EQ(sum, want_sum);
    EXPECT_EQ(out, want_out);
    EXPECT_EQ(mean, want_mean);
    EXPECT_EQ(rstd, want_rstd);

    std::vector<float> zero_sum(N * C), zero_out(N * C);
    residual_layernorm_forward(zero_sum.data(), zero_out.data(), mean.data(), rstd.data(),
                               residual.data(), y.data(), zeros.data(), w.data(), zeros.data(), N,
                               C, eps, dtype);
    EXPECT_EQ(zero_sum, want_sum);
    EXPECT_EQ(zero_out, want_out);

    std::vector<float> stream = residual;  // the residual stream updated in place
    residual_layernorm_forward<float>(stream.data(), out.data(), mean.data(), rstd.data(),
                                      stream.data(), y.data(), nullptr, w.data(), nullptr, N, C,
                                      eps, dtype);
    EXPECT_EQ(stream, want_sum);
    EXPECT_EQ(out, want_out);
  }
}

// Without a bias gradient (dbias null) the weight half sums dweight exactly as it does beside
// dbias, and layernorm_backward adds the same dinp and dweight.
TEST(LayerNorm, BackwardWithoutBiasGradient) {
  std::mt19937_64 rng(4);
  const int N = 67, C = 200;
  const std::vector<float> x = converted<float>(random_vector(N * C, rng, 2.0)),
                           w = converted<float>(random_vector(C, rng)),
                           dout = converted<float>(random_vector(N * C, rng)),
                           dx0 = converted<float>(random_vector(N * C, rng)),
                           dw0 = converted<float>(random_vector(C, rng)),
                           db0 = converted<float>(random_vector(C, rng));
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C,
                           0.1f);

  std::vector<float> dw = dw0, db = db0;
  layernorm_backward_weight(dw.data(), db.data(), dout.data(), x.data(), mean.data(), rstd.data(),
                            N, C);
  std::vector<float> dw_alone = dw0;
  layernorm_backward_weight<float>(dw_alone.data(), nullptr, dout.data(), x.data(), mean.data(),
                                   rstd.data(), N, C);
  EXPECT_EQ(dw_alone, dw);
  EXPECT_NE(dw_alone, dw0);

  std::vector<float> dx = dx0;
  dw = dw0;
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  std::vector<float> dx_alone = dx0;
  dw_alone = dw0;
  layernorm_backward<float>(dx_alone.data(), dw_alone.data(), nullptr, dout.data(), x.data(),
                            w.data(), mean.data(), rstd.data(), N, C);
  EXPECT_EQ(dx_alone, dx);
  EXPECT_EQ(dw_alone, dw);
}

// The loss Σ probe ⊙ LayerNorm(x; w) without a bias, at eps 0.1 (a tenth of the inputs' variance
// at most rows, so the normalisation is far from exact): dL/dout = probe.
TEST(LayerNorm, BackwardWithoutBiasMatchesFiniteDifferencesAtALargeEps) {
  std::mt19937_64 rng(5);
  for (const Shape s : {Shape{4, 9}, Shape{3, 33}}) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C);
    std::vector<double> x = random_vector(s.N * s.C, rng), w = random_vector(s.C, rng);
    const std::vector<double> probe = random_vector(s.N * s.C, rng);
    std::vector<double> out(s.N * s.C), mean(s.N), rstd(s.N);
    auto loss = [&] {
      layernorm_forward<double>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr,
                                s.N, s.C, 0.1f);
      return dot(out, probe);
    };
    loss();
    std::vector<double> dx(s.N * s.C, 0.0), dw(s.C, 0.0);
    layernorm_backward<double>(dx.data(), dw.data(), nullptr, probe.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), s.N, s.C);
    expect_matches_finite_differences(x, dx, loss, "input");
    expect_matches_finite_differences(w, dw, loss, "weight");
  }
}

}  // namespace
}  // namespace strata::cpu
