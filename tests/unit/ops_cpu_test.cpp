// CpuOps<T> (model/ops/cpu_ops.h) against the kernel sequences the GPT block ran before the ops
// existed: each op must be its kernels followed by round_to_dtype of what they wrote, bit for bit,
// for float and double in every compute dtype. That is what keeps the model's training bitwise
// unchanged by the ops layer (scripts/compare_builds.sh checks the whole model).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/precision.h"
#include "model/kernels/cpu/residual.h"
#include "model/kernels/cpu/vocab_parallel.h"
#include "model/ops/cpu_ops.h"

namespace strata {
namespace {

using cpu::ComputeDtype;
constexpr ComputeDtype kDtypes[] = {ComputeDtype::fp32, ComputeDtype::bf16, ComputeDtype::fp16};

template <class T>
std::vector<T> random_vector(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(normal(rng));
  return v;
}

// Bitwise, so that -0.0 ≠ 0.0 and NaNs compare by their bits too.
template <class T>
void expect_bitwise(const std::vector<T>& expected, const std::vector<T>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  EXPECT_EQ(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(T)), 0);
}

template <class T>
void round(std::vector<T>& v, ComputeDtype dtype) {
  if (dtype != ComputeDtype::fp32)
    cpu::round_to_dtype(v.data(), static_cast<long>(v.size()), dtype);
}

template <class T>
class OpsCpu : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(OpsCpu, Types);

// Shapes not multiples of a vector width; values in fp16's range.
constexpr int N = 13, IC = 19, OC = 23, C = 24;

TYPED_TEST(OpsCpu, MatmulForwardEpilogues) {
  using T = TypeParam;
  std::mt19937_64 rng(1);
  const auto inp = random_vector<T>(N * IC, rng), weight = random_vector<T>(OC * IC, rng),
             bias = random_vector<T>(OC, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(cpu::compute_dtype_name(dtype));
    CpuOps<T> ops(dtype);
    {  // bias: the product with its bias, rounded
      std::vector<T> expected(N * OC), actual(N * OC);
      cpu::matmul_forward(expected.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
      round(expected, dtype);
      ops.matmul_forward(actual.data(), nullptr, inp.data(), weight.data(), bias.data(), N, IC, OC,
                         Epilogue::bias, Fp8Gemm{});
      expect_bitwise(expected, actual);
    }
    {  // gelu: the bias inside the product, rounded, GELU, rounded (the MoE experts' order)
      std::vector<T> pre(N * OC), out(N * OC), actual_pre(N * OC), actual_out(N * OC);
      cpu::matmul_forward(pre.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
      round(pre, dtype);
      cpu::gelu_forward(out.data(), pre.data(), static_cast<long>(N) * OC);
      round(out, dtype);
      ops.matmul_forward(actual_out.data(), actual_pre.data(), inp.data(), weight.data(),
                         bias.data(), N, IC, OC, Epilogue::gelu, Fp8Gemm{});
      expect_bitwise(pre, actual_pre);
      expect_bitwise(out, actual_out);
    }
    {  // bias_gelu: a bias-free product, then the bias and GELU in one pass (the dense MLP's)
      std::vector<T> pre(N * OC), out(N * OC), actual_pre(N * OC), actual_out(N * OC);
      cpu::matmul_forward(pre.data(), inp.data(), weight.data(), static_cast<const T*>(nullptr), N,
                          IC, OC);
      cpu::bias_gelu_forward(out.data(), pre.data(), bias.data(), N, OC, dtype);
      ops.matmul_forward(actual_out.data(), actual_pre.data(), inp.data(), weight.data(),
                         bias.data(), N, IC, OC, Epilogue::bias_gelu, Fp8Gemm{});
      expect_bitwise(pre, actual_pre);
      expect_bitwise(out, actual_out);
    }
  }
}

TYPED_TEST(OpsCpu, MatmulBackward) {
  using T = TypeParam;
  std::mt19937_64 rng(2);
  const auto dout = random_vector<T>(N * OC, rng), inp = random_vector<T>(N * IC, rng),
             weight = random_vector<T>(OC * IC, rng), dweight0 = random_vector<T>(OC * IC, rng),
             dbias0 = random_vector<T>(OC, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(cpu::compute_dtype_name(dtype));
    CpuOps<T> ops(dtype);
    std::vector<T> dinp(N * IC), actual(N * IC);
    cpu::matmul_backward_input(dinp.data(), dout.data(), weight.data(), N, IC, OC);
    round(dinp, dtype);
    ops.matmul_backward_input(actual.data(), dout.data(), weight.data(), nullptr, N, IC, OC,
                              Fp8Gemm{});
    expect_bitwise(dinp, actual);
    // With the forward's GELU input: the product rounded, then GELU' (rounded), as two kernels.
    const auto pre_gelu = random_vector<T>(N * IC, rng);
    std::vector<T> product(N * IC), dpre(N * IC), actual_dpre(N * IC);
    cpu::matmul_backward_input(product.data(), dout.data(), weight.data(), N, IC, OC);
    round(product, dtype);
    cpu::gelu_backward(dpre.data(), pre_gelu.data(), product.data(), static_cast<long>(N) * IC);
    round(dpre, dtype);
    ops.matmul_backward_input(actual_dpre.data(), dout.data(), weight.data(), pre_gelu.data(), N,
                              IC, OC, Fp8Gemm{});
    expect_bitwise(dpre, actual_dpre);

    // Parameter gradients accumulate in T, unrounded.
    auto dweight = dweight0, dbias = dbias0, actual_dweight = dweight0, actual_dbias = dbias0;
    cpu::matmul_backward_weight(dweight.data(), dbias.data(), dout.data(), inp.data(), N, IC, OC);
    ops.matmul_backward_weight(actual_dweight.data(), actual_dbias.data(), dout.data(), inp.data(),
                               N, IC, OC, Fp8Gemm{});
    expect_bitwise(dweight, actual_dweight);
    expect_bitwise(dbias, actual_dbias);

    // The row-parallel form: the replicated bias over this rank's rows only (sequence
    // parallelism) or all of them, summed row by row, before the weight GEMM without a bias.
    for (const RowRange rows : {RowRange{0, N}, RowRange{5, 4}}) {
      dweight = actual_dweight = dweight0;
      dbias = actual_dbias = dbias0;
      cpu::bias_backward(dbias.data(), dout.data() + static_cast<long>(rows.begin) * OC, rows.count,
                         OC);
      cpu::matmul_backward_weight(dweight.data(), static_cast<T*>(nullptr), dout.data(), inp.data(),
                                  N, IC, OC);
      ops.matmul_backward_weight_rows(actual_dweight.data(), actual_dbias.data(), dout.data(),
                                      inp.data(), N, IC, OC, rows, Fp8Gemm{});
      expect_bitwise(dweight, actual_dweight);
      expect_bitwise(dbias, actual_dbias);
    }
  }
}

TYPED_TEST(OpsCpu, Gelu) {
  using T = TypeParam;
  std::mt19937_64 rng(4);
  const long n = static_cast<long>(N) * C;
  const auto inp = random_vector<T>(n, rng), dout = random_vector<T>(n, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(cpu::compute_dtype_name(dtype));
    CpuOps<T> ops(dtype);
    std::vector<T> out(n), actual(n);
    cpu::gelu_forward(out.data(), inp.data(), n);
    round(out, dtype);
    ops.gelu_forward(actual.data(), inp.data(), n);
    expect_bitwise(out, actual);
    std::vector<T> dinp(n), actual_dinp(n);
    cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    round(dinp, dtype);
    ops.gelu_backward(actual_dinp.data(), inp.data(), dout.data(), n);
    expect_bitwise(dinp, actual_dinp);
  }
}

TYPED_TEST(OpsCpu, LayerNormAndResiduals) {
  using T = TypeParam;
  std::mt19937_64 rng(5);
  const auto x = random_vector<T>(N * C, rng), y = random_vector<T>(N * C, rng),
             dout = random_vector<T>(N * C, rng), dinp0 = random_vector<T>(N * C, rng),
             weight = random_vector<T>(C, rng), bias = random_vector<T>(C, rng),
             y_bias = random_vector<T>(C, rng), dweight0 = random_vector<T>(C, rng),
             dbias0 = random_vector<T>(C, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(cpu::compute_dtype_name(dtype));
    CpuOps<T> ops(dtype);
    // LayerNorm forward: out rounded, statistics as computed.
    std::vector<T> out(N * C), mean(N), rstd(N), a_out(N * C), a_mean(N), a_rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                           bias.data(), N, C, kGpt2NormEps);
    round(out, dtype);
    ops.layernorm_forward(a_out.data(), a_mean.data(), a_rstd.data(), x.data(), weight.data(),
                          bias.data(), N, C, kGpt2NormEps, {});
    expect_bitwise(out, a_out);
    expect_bitwise(mean, a_mean);
    expect_bitwise(rstd, a_rstd);

    // The fused residual add and LayerNorm: the kernel with the compute dtype.
    std::vector<T> sum(N * C), a_sum(N * C);
    cpu::residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), x.data(),
                                    y.data(), y_bias.data(), weight.data(), bias.data(), N, C,
                                    kGpt2NormEps, dtype);
    ops.residual_layernorm_forward(a_sum.data(), a_out.data(), a_mean.data(), a_rstd.data(),
                                   x.data(), y.data(), y_bias.data(), weight.data(), bias.data(), N,
                                   C, kGpt2NormEps, {});
    expect_bitwise(sum, a_sum);
    expect_bitwise(out, a_out);
    expect_bitwise(mean, a_mean);
    expect_bitwise(rstd, a_rstd);

    // Backward: dinp += ..., then rounded; parameter gradients accumulated unrounded.
    auto dinp = dinp0, a_dinp = dinp0;
    cpu::layernorm_backward_input(dinp.data(), dout.data(), x.data(), weight.data(), mean.data(),
                                  rstd.data(), N, C);
    round(dinp, dtype);
    ops.layernorm_backward_input(a_dinp.data(), dout.data(), x.data(), weight.data(), mean.data(),
                                 rstd.data(), N, C);
    expect_bitwise(dinp, a_dinp);
    auto dweight = dweight0, dbias = dbias0, a_dweight = dweight0, a_dbias = dbias0;
    cpu::layernorm_backward_weight(dweight.data(), dbias.data(), dout.data(), x.data(), mean.data(),
                                   rstd.data(), N, C);
    ops.layernorm_backward_weight(a_dweight.data(), a_dbias.data(), dout.data(), x.data(),
                                  mean.data(), rstd.data(), N, C);
    expect_bitwise(dweight, a_dweight);
    expect_bitwise(dbias, a_dbias);

    // Without biases (model.bias: false) and with another eps: the null pointers and the eps pass
    // through to the kernels.
    const float eps = 0.25f;
    cpu::residual_layernorm_forward<T>(sum.data(), out.data(), mean.data(), rstd.data(), x.data(),
                                       y.data(), nullptr, weight.data(), nullptr, N, C, eps, dtype);
    ops.residual_layernorm_forward(a_sum.data(), a_out.data(), a_mean.data(), a_rstd.data(),
                                   x.data(), y.data(), nullptr, weight.data(), nullptr, N, C, eps,
                                   {});
    expect_bitwise(sum, a_sum);
    expect_bitwise(out, a_out);
    expect_bitwise(rstd, a_rstd);
    cpu::layernorm_forward<T>(out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                              nullptr, N, C, eps);
    round(out, dtype);
    ops.layernorm_forward(a_out.data(), a_mean.data(), a_rstd.data(), x.data(), weight.data(),
                          nullptr, N, C, eps, {});
    expect_bitwise(out, a_out);
    expect_bitwise(rstd, a_rstd);
    ops.layernorm_backward_weight(a_dweight.data(), nullptr, dout.data(), x.data(), mean.data(),
                                  rstd.data(), N, C);
    cpu::layernorm_backward_weight<T>(dweight.data(), nullptr, dout.data(), x.data(), mean.data(),
                                      rstd.data(), N, C);
    expect_bitwise(dweight, a_dweight);

    // The residual add closing a row-parallel layer, with and without its bias; out may be x.
    for (const T* b : {y_bias.data(), static_cast<const T*>(nullptr)}) {
      std::vector<T> r(N * C), a_r = x;
      cpu::residual_bias_forward(r.data(), x.data(), y.data(), b, N, C);
      round(r, dtype);
      ops.residual_bias_forward(a_r.data(), a_r.data(), y.data(), b, N, C);
      expect_bitwise(r, a_r);
    }
  }
}

// Multi-head (KV = NH) and multi-query (KV = 1) heads: the grouped qkv row is C + 2·KV·hs wide,
// and the backward rounds all of dqkv.
TYPED_TEST(OpsCpu, Attention) {
  using T = TypeParam;
  const int B = 2, T_ = 7, AC = 8, NH = 2, hs = AC / NH;
  const long rows = static_cast<long>(B) * T_;
  std::mt19937_64 rng(6);
  for (const int KV : {NH, 1}) {
    const long C3 = AC + 2L * KV * hs;
    const auto qkv = random_vector<T>(rows * C3, rng), dout = random_vector<T>(rows * AC, rng);
    for (ComputeDtype dtype : kDtypes) {
      SCOPED_TRACE(std::string(cpu::compute_dtype_name(dtype)) + " KV " + std::to_string(KV));
      CpuOps<T> ops(dtype);
      std::vector<T> scratch, out(rows * AC), a_out(rows * AC), lse(rows * NH), a_lse(rows * NH);
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T_, AC, NH, KV, scratch);
      round(out, dtype);
      ops.attention_forward(a_out.data(), a_lse.data(), qkv.data(), B, T_, AC, NH, KV);
      expect_bitwise(out, a_out);
      expect_bitwise(lse, a_lse);
      std::vector<T> dqkv(rows * C3), a_dqkv(rows * C3);
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T_,
                              AC, NH, KV, dtype, scratch);
      round(dqkv, dtype);
      ops.attention_backward(a_dqkv.data(), dout.data(), qkv.data(), a_out.data(), a_lse.data(), B,
                             T_, AC, NH, KV);
      expect_bitwise(dqkv, a_dqkv);
      // KV-cache decoding: rows [3, T_) of one sequence against the rows before them.
      std::vector<T> rows_out((T_ - 3) * AC), a_rows_out((T_ - 3) * AC);
      cpu::attention_forward_rows(rows_out.data(), qkv.data(), 3, T_, AC, NH, KV);
      round(rows_out, dtype);
      ops.attention_forward_rows(a_rows_out.data(), qkv.data(), 3, T_, AC, NH, KV);
      expect_bitwise(rows_out, a_rows_out);
    }
  }
}

// The vocabulary-parallel ends on one rank's shard [3, 3 + Vl) of a padded vocabulary whose last
// ids are padding (id >= V).
TYPED_TEST(OpsCpu, EmbeddingAndCrossEntropy) {
  using T = TypeParam;
  const int V = 11, Vl = 10, T_ = 5, rows = 6;
  const VocabShard vocab{3, Vl, V};
  std::mt19937_64 rng(8);
  const std::vector<std::int32_t> tokens = {0, 3, 10, 5, 7, 3, 10, 4, 9, 1, 2, 6, 8};  // N ids
  const auto wte = random_vector<T>(Vl * C, rng), wpe = random_vector<T>(T_ * C, rng),
             x0 = random_vector<T>(rows * C, rng), dout = random_vector<T>(N * C, rng),
             logits0 = random_vector<T>(N * Vl, rng), dwte0 = random_vector<T>(Vl * C, rng),
             dwpe0 = random_vector<T>(T_ * C, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(cpu::compute_dtype_name(dtype));
    CpuOps<T> ops(dtype);
    std::vector<T> out(N * C), a_out(N * C);
    cpu::embedding_shard_forward(out.data(), tokens.data(), wte.data(), vocab.begin, Vl, N, C);
    ops.embedding_forward(a_out.data(), tokens.data(), wte.data(), vocab, N, C);
    expect_bitwise(out, a_out);
    auto x = x0, a_x = x0;  // rows 4.. of the flattened positions, rounded after the addition
    cpu::position_embedding_forward(x.data(), wpe.data(), 4, rows, T_, C);
    round(x, dtype);
    ops.position_embedding_forward(a_x.data(), wpe.data(), 4, rows, T_, C);
    expect_bitwise(x, a_x);
    auto dwte = dwte0, a_dwte = dwte0, dwpe = dwpe0, a_dwpe = dwpe0;
    cpu::embedding_shard_backward(dwte.data(), dout.data(), tokens.data(), vocab.begin, Vl, N, C);
    ops.embedding_backward(a_dwte.data(), dout.data(), tokens.data(), vocab, N, C);
    expect_bitwise(dwte, a_dwte);
    cpu::position_embedding_backward(dwpe.data(), dout.data(), 4, rows, T_, C);
    ops.position_embedding_backward(a_dwpe.data(), dout.data(), 4, rows, T_, C);
    expect_bitwise(dwpe, a_dwpe);

    // Cross-entropy over the one shard: losses, the probabilities in place of the logits, then
    // the logits' gradient of loss_scale · mean, rounded.
    const T loss_scale = 3;
    std::vector<T> row_max(N), sums(2 * N), losses(N), a_losses(N);
    auto logits = logits0, a_logits = logits0;
    cpu::crossentropy_shard_max(row_max.data(), logits.data(), vocab.begin, V, N, Vl);
    cpu::crossentropy_shard_sums(sums.data(), sums.data() + N, logits.data(), tokens.data(),
                                 row_max.data(), vocab.begin, V, N, Vl);
    cpu::crossentropy_shard_finish(losses.data(), logits.data(), logits.data(), row_max.data(),
                                   sums.data(), sums.data() + N, vocab.begin, V, N, Vl);
    ops.cross_entropy_forward(a_losses.data(), nullptr, a_logits.data(), tokens.data(), vocab, N);
    expect_bitwise(losses, a_losses);
    expect_bitwise(logits, a_logits);
    const std::vector<T> dlosses(N, loss_scale / static_cast<T>(N));
    cpu::crossentropy_shard_backward(logits.data(), logits.data(), tokens.data(), dlosses.data(),
                                     vocab.begin, V, N, Vl);
    round(logits, dtype);
    ops.cross_entropy_backward(a_losses.data(), nullptr, a_logits.data(), tokens.data(), loss_scale,
                               vocab, N);
    expect_bitwise(logits, a_logits);
    auto fused = logits0;  // forward_backward is exactly the two
    ops.cross_entropy_forward_backward(a_losses.data(), nullptr, fused.data(), tokens.data(),
                                       loss_scale, vocab, N);
    expect_bitwise(logits, fused);
    expect_bitwise(losses, a_losses);
  }
}

// One rank: the row collectives are nothing (the sum stays in place, the gather returns its
// input) except gather_rows_into's copy; never a rounding.
TYPED_TEST(OpsCpu, RowsOfOneRank) {
  using T = TypeParam;
  std::mt19937_64 rng(9);
  const auto v = random_vector<T>(N * C, rng);
  CpuOps<T> ops(ComputeDtype::bf16, nullptr, true);
  EXPECT_FALSE(ops.sequence_parallel());
  EXPECT_EQ(ops.tp_size(), 1);
  auto partial = v;
  std::vector<T> out(N * C);
  EXPECT_EQ(ops.sum_rows(partial.data(), out.data(), N, C), partial.data());
  expect_bitwise(v, partial);
  EXPECT_EQ(ops.gather_rows(v.data(), out.data(), N, C), v.data());
  ops.gather_rows_into(v.data(), out.data(), N, C);
  expect_bitwise(v, out);
}

TYPED_TEST(OpsCpu, RoundToCompute) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  const auto v = random_vector<T>(N * C, rng);
  for (ComputeDtype dtype : kDtypes) {
    SCOPED_TRACE(cpu::compute_dtype_name(dtype));
    auto expected = v, actual = v;
    round(expected, dtype);
    CpuOps<T>(dtype).round_to_compute(actual.data(), static_cast<long>(actual.size()));
    expect_bitwise(expected, actual);
  }
}

}  // namespace
}  // namespace strata
