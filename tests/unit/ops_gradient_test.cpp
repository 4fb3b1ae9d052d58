// Every CPU op's backward against central finite differences of its forward, in double precision.
// Each check uses the scalar loss L = Σ w ⊙ forward(x) with a fixed random w, so dL/dout = w.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/crossentropy.h"
#include "model/kernels/cpu/embedding.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"

namespace strata::cpu {
namespace {

using Vec = std::vector<double>;

Vec random_vector(std::size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Vec v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of `loss` w.r.t. `x` (perturbed in place).
void expect_matches_finite_differences(Vec& x, const Vec& analytic,
                                       const std::function<double()>& loss, const char* what) {
  const double h = 1e-6;
  double max_error = 0, max_ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    max_error = std::max(max_error, std::abs(numeric - analytic[i]));
    max_ref = std::max(max_ref, std::abs(numeric));
  }
  // Central differences in double are accurate to ~1e-9 relative at these magnitudes.
  EXPECT_LE(max_error, 1e-6 * std::max(1.0, max_ref))
      << what << ": max |numeric - analytic| = " << max_error;
}

TEST(OpsGradient, Matmul) {
  std::mt19937_64 rng(1);
  const int N = 5, IC = 7, OC = 6;
  Vec x = random_vector(N * IC, rng), w = random_vector(OC * IC, rng), b = random_vector(OC, rng);
  const Vec probe = random_vector(N * OC, rng);
  Vec out(N * OC);
  auto loss = [&] {
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(out, probe);
  };
  Vec dx(N * IC), dw(OC * IC, 0.0), db(OC, 0.0);
  matmul_backward(dx.data(), dw.data(), db.data(), probe.data(), x.data(), w.data(), N, IC, OC);
  expect_matches_finite_differences(x, dx, loss, "input");
  expect_matches_finite_differences(w, dw, loss, "weight");
  expect_matches_finite_differences(b, db, loss, "bias");
}

TEST(OpsGradient, Embedding) {
  std::mt19937_64 rng(2);
  const int B = 2, T = 3, C = 5, V = 4;
  const std::vector<std::int32_t> tokens = {0, 3, 3, 1, 0, 2};
  Vec wte = random_vector(V * C, rng), wpe = random_vector(T * C, rng);
  const Vec probe = random_vector(B * T * C, rng);
  Vec out(B * T * C);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, probe);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  embedding_backward(dwte.data(), dwpe.data(), probe.data(), tokens.data(), B, T, C);
  expect_matches_finite_differences(wte, dwte, loss, "wte");
  expect_matches_finite_differences(wpe, dwpe, loss, "wpe");
}

TEST(OpsGradient, LayerNorm) {
  std::mt19937_64 rng(3);
  const int N = 4, C = 9;
  Vec x = random_vector(N * C, rng, 2.0), w = random_vector(C, rng), b = random_vector(C, rng);
  const Vec probe = random_vector(N * C, rng);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, probe);
  };
  loss();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), probe.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_matches_finite_differences(x, dx, loss, "input");
  expect_matches_finite_differences(w, dw, loss, "weight");
  expect_matches_finite_differences(b, db, loss, "bias");
}

TEST(OpsGradient, Gelu) {
  std::mt19937_64 rng(4);
  const int n = 40;
  Vec x = random_vector(n, rng, 3.0);
  const Vec probe = random_vector(n, rng);
  Vec out(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(out, probe);
  };
  Vec dx(n);
  gelu_backward(dx.data(), x.data(), probe.data(), n);
  expect_matches_finite_differences(x, dx, loss, "input");
}

TEST(OpsGradient, CausalAttention) {
  std::mt19937_64 rng(5);
  const int B = 2, T = 5, C = 8, NH = 2;
  Vec qkv = random_vector(B * T * 3 * C, rng);
  const Vec probe = random_vector(B * T * C, rng);
  Vec out(B * T * C), probs(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
    return dot(out, probe);
  };
  loss();
  Vec dqkv(B * T * 3 * C);
  attention_backward(dqkv.data(), probe.data(), qkv.data(), probs.data(), B, T, C, NH);
  expect_matches_finite_differences(qkv, dqkv, loss, "qkv");
}

TEST(OpsGradient, CausalAttentionIgnoresTheFuture) {
  std::mt19937_64 rng(6);
  const int B = 1, T = 4, C = 4, NH = 1;
  Vec qkv = random_vector(B * T * 3 * C, rng);
  Vec out(B * T * C), probs(T * T), changed(B * T * C);
  attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
  for (int c = 0; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 1.0;  // perturb the last position
  attention_forward(changed.data(), probs.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(out[i], changed[i]);
}

TEST(OpsGradient, SoftmaxCrossEntropyWithPaddedVocabulary) {
  std::mt19937_64 rng(7);
  const int N = 3, V = 5, Vp = 8;
  Vec logits = random_vector(N * Vp, rng, 2.0);
  const std::vector<std::int32_t> targets = {4, 0, 2};
  const Vec probe = random_vector(N, rng);
  Vec losses(N), probs(N * Vp);
  auto loss = [&] {
    softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V,
                                 Vp);
    return dot(losses, probe);
  };
  loss();
  Vec dlogits(N * Vp);
  softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), probe.data(), N, V,
                                Vp);
  expect_matches_finite_differences(logits, dlogits, loss, "logits");
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v)
      EXPECT_EQ(dlogits[n * Vp + v], 0.0) << "padded column has a gradient";
}

TEST(OpsGradient, CrossEntropyStaysFiniteWhenTheTargetProbabilityUnderflows) {
  const int N = 1, V = 3, Vp = 3;
  std::vector<float> logits = {0.0f, 200.0f, 0.0f}, probs(3), losses(1);
  const std::int32_t target = 0;
  softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), &target, N, V, Vp);
  EXPECT_NEAR(losses[0], 200.0f, 1e-3f);
}

}  // namespace
}  // namespace strata::cpu
