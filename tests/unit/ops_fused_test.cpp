// The fused CPU kernels against the kernels they replace, in every compute dtype: the residual add
// with the LayerNorm after it (layernorm.h) bit for bit, the GEMM bias with the GELU (gelu.h) bit
// for bit against the same product with the bias added after it and to rounding against a GEMM
// that adds the bias itself; and attention's recomputed probabilities against the gradient of the
// forward pass in bf16 (the rounding the backward pass applies must not change fp32's answer
// beyond bf16's precision).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/precision.h"
#include "model/kernels/cpu/residual.h"

namespace strata::cpu {
namespace {

using Vec = std::vector<float>;
constexpr ComputeDtype kDtypes[] = {ComputeDtype::fp32, ComputeDtype::bf16, ComputeDtype::fp16};
constexpr float kEps = 1e-5f;  // GPT-2's LayerNorm eps

Vec random_vector(std::size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(OpsFused, ResidualLayerNormIsTheResidualAddThenTheLayerNorm) {
  std::mt19937_64 rng(11);
  const int N = 37, C = 72;  // C not a multiple of the vector width
  const Vec x = random_vector(N * C, rng), y = random_vector(N * C, rng),
            bias = random_vector(C, rng), weight = random_vector(C, rng),
            ln_bias = random_vector(C, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(compute_dtype_name(dtype));
    Vec sum(N * C), out(N * C), mean(N), rstd(N);
    residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), x.data(), y.data(),
                               bias.data(), weight.data(), ln_bias.data(), N, C, kEps, dtype);
    Vec want_sum(N * C), want_out(N * C), want_mean(N), want_rstd(N);
    residual_bias_forward(want_sum.data(), x.data(), y.data(), bias.data(), N, C);
    round_to_dtype(want_sum.data(), N * C, dtype);
    layernorm_forward(want_out.data(), want_mean.data(), want_rstd.data(), want_sum.data(),
                      weight.data(), ln_bias.data(), N, C, kEps);
    round_to_dtype(want_out.data(), N * C, dtype);
    EXPECT_EQ(sum, want_sum);
    EXPECT_EQ(out, want_out);
    EXPECT_EQ(mean, want_mean);
    EXPECT_EQ(rstd, want_rstd);
    if (dtype == ComputeDtype::bf16) {  // the fused kernel did round
      for (float v : out) ASSERT_EQ(v, round_to_bf16(v));
    }
  }
}

TEST(OpsFused, BiasGeluIsTheBiasThenTheGelu) {
  std::mt19937_64 rng(12);
  const int N = 19, IC = 40, H = 88;
  const Vec inp = random_vector(N * IC, rng), weight = random_vector(H * IC, rng, 0.3f),
            bias = random_vector(H, rng);
  Vec product(N * H);
  matmul_forward(product.data(), inp.data(), weight.data(), static_cast<const float*>(nullptr), N,
                 IC, H);
  Vec with_bias(N * H);  // a GEMM that adds the bias itself
  matmul_forward(with_bias.data(), inp.data(), weight.data(), bias.data(), N, IC, H);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(compute_dtype_name(dtype));
    Vec pre = product, out(N * H);
    bias_gelu_forward(out.data(), pre.data(), bias.data(), N, H, dtype);
    Vec want_pre = product, want_out(N * H);
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < H; ++h) want_pre[n * H + h] += bias[h];
    round_to_dtype(want_pre.data(), N * H, dtype);
    gelu_forward(want_out.data(), want_pre.data(), N * H);
    round_to_dtype(want_out.data(), N * H, dtype);
    EXPECT_EQ(pre, want_pre);
    EXPECT_EQ(out, want_out);
    if (dtype == ComputeDtype::fp32) {
      for (int i = 0; i < N * H; ++i)
        ASSERT_NEAR(pre[i], with_bias[i], 1e-5f * (1.0f + std::fabs(with_bias[i]))) << i;
    }
  }
}

// In bf16 the backward pass rounds the probabilities it recomputes, as the forward pass's stored
// bf16 probabilities were: the gradient moves from fp32's by about bf16's precision, no more, and
// does move (the rounding is applied).
TEST(OpsFused, AttentionBackwardRoundsTheRecomputedProbabilities) {
  std::mt19937_64 rng(13);
  const int B = 2, T = 70, C = 32, NH = 2;
  const Vec qkv = random_vector(B * T * 3 * C, rng), dout = random_vector(B * T * C, rng);
  Vec out(B * T * C), lse(B * T * NH), scratch, exact(B * T * 3 * C), rounded(B * T * 3 * C);
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, scratch);
  attention_backward(exact.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NH,
                     ComputeDtype::fp32, scratch);
  attention_backward(rounded.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                     NH, ComputeDtype::bf16, scratch);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    diff += (exact[i] - rounded[i]) * double(exact[i] - rounded[i]);
    norm += exact[i] * double(exact[i]);
  }
  const double relative = std::sqrt(diff / norm);
  EXPECT_GT(relative, 1e-5);
  EXPECT_LT(relative, 1e-2);  // bf16 keeps 8 significant bits: 2^-9 ≈ 2e-3 per value
}

}  // namespace
}  // namespace strata::cpu
