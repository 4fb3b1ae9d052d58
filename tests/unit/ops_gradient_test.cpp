// Every CPU op's backward against central finite differences of its forward, in double precision.
// Each check uses the scalar loss L = Σ w ⊙ forward(x) with a fixed random w, so dL/dout = w.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/residual.h"
#include "model/kernels/cpu/vocab_parallel.h"
#include "tests/support/finite_differences.h"

namespace strata::cpu {
namespace {

using testing::dot;
using testing::expect_matches_finite_differences;
using testing::random_vector;
using testing::Vec;

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

// The vocabulary-parallel embedding, split into two shards, plus positions, against finite
// differences of the sum of both shards' lookups.
TEST(OpsGradient, VocabParallelEmbeddingAndPositions) {
  std::mt19937_64 rng(2);
  const int B = 2, T = 3, C = 5, V = 4, split = 3;  // shard 0: ids [0, 3), shard 1: [3, 4)
  const int N = B * T;
  const std::vector<std::int32_t> tokens = {0, 3, 3, 1, 0, 2};
  Vec wte = random_vector(V * C, rng), wpe = random_vector(T * C, rng);
  const Vec probe = random_vector(N * C, rng);
  Vec out(N * C), part(N * C);
  auto loss = [&] {
    embedding_shard_forward(out.data(), tokens.data(), wte.data(), 0, split, N, C);
    embedding_shard_forward(part.data(), tokens.data(), wte.data() + split * C, split, V - split, N,
                            C);
    for (int i = 0; i < N * C; ++i) out[i] += part[i];
    position_embedding_forward(out.data(), wpe.data(), 0, N, T, C);
    return dot(out, probe);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  embedding_shard_backward(dwte.data(), probe.data(), tokens.data(), 0, split, N, C);
  embedding_shard_backward(dwte.data() + split * C, probe.data(), tokens.data(), split, V - split,
                           N, C);
  position_embedding_backward(dwpe.data(), probe.data(), 0, N, T, C);
  expect_matches_finite_differences(wte, dwte, loss, "wte");
  expect_matches_finite_differences(wpe, dwpe, loss, "wpe");
}

// Positions of a slice of the flattened rows (sequence parallelism): row r of the slice is
// position (row_begin + r) mod T.
TEST(OpsGradient, PositionEmbeddingOfARowSlice) {
  std::mt19937_64 rng(3);
  const int T = 4, C = 3, rows = 5;
  const long row_begin = 3;
  Vec wpe = random_vector(T * C, rng);
  const Vec probe = random_vector(rows * C, rng);
  Vec out(rows * C);
  auto loss = [&] {
    std::fill(out.begin(), out.end(), 0.0);
    position_embedding_forward(out.data(), wpe.data(), row_begin, rows, T, C);
    return dot(out, probe);
  };
  loss();
  for (int r = 0; r < rows; ++r)
    EXPECT_EQ(out[r * C], wpe[((row_begin + r) % T) * C]) << "row " << r;
  Vec dwpe(T * C, 0.0);
  position_embedding_backward(dwpe.data(), probe.data(), row_begin, rows, T, C);
  expect_matches_finite_differences(wpe, dwpe, loss, "wpe");
}

TEST(OpsGradient, ResidualWithBias) {
  std::mt19937_64 rng(4);
  const int N = 4, C = 3;
  Vec x = random_vector(N * C, rng), y = random_vector(N * C, rng), b = random_vector(C, rng);
  const Vec probe = random_vector(N * C, rng);
  Vec out(N * C);
  auto loss = [&] {
    residual_bias_forward(out.data(), x.data(), y.data(), b.data(), N, C);
    return dot(out, probe);
  };
  Vec db(C, 0.0);
  bias_backward(db.data(), probe.data(), N, C);
  expect_matches_finite_differences(b, db, loss, "bias");
  // d/dx and d/dy are the identity: the residual passes the output gradient through unchanged.
  loss();
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(out[i], x[i] + (y[i] + b[i % C]));
}

TEST(OpsGradient, LayerNorm) {
  std::mt19937_64 rng(3);
  const int N = 4, C = 9;
  Vec x = random_vector(N * C, rng, 2.0), w = random_vector(C, rng), b = random_vector(C, rng);
  const Vec probe = random_vector(N * C, rng);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                      1e-5f);
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

// Causal attention with NH query heads over KV key/value heads of size hs: with KV < NH each key
// and value feeds every query head of its group, so its gradient is the group's sum.
void expect_attention_matches_finite_differences(int NH, int KV, int hs, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int B = 2, T = 5, C = NH * hs, C3 = (NH + 2 * KV) * hs;
  Vec qkv = random_vector(B * T * C3, rng);
  const Vec probe = random_vector(B * T * C, rng);
  Vec out(B * T * C), lse(B * T * NH), scratch;
  auto loss = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KV, scratch);
    return dot(out, probe);
  };
  loss();
  Vec dqkv(B * T * C3);
  attention_backward(dqkv.data(), probe.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, KV,
                     ComputeDtype::fp32, scratch);
  expect_matches_finite_differences(qkv, dqkv, loss, "qkv");
}

TEST(OpsGradient, CausalAttention) { expect_attention_matches_finite_differences(2, 2, 4, 5); }

// Multi-query (KV = 1) and groups of two.
TEST(OpsGradient, CausalGroupedQueryAttention) {
  for (const int KV : {1, 2}) {
    SCOPED_TRACE("KV " + std::to_string(KV));
    expect_attention_matches_finite_differences(4, KV, 2, 7);
  }
}

TEST(OpsGradient, CausalAttentionIgnoresTheFuture) {
  std::mt19937_64 rng(6);
  const int B = 1, T = 4, C = 4, NH = 1;
  Vec qkv = random_vector(B * T * 3 * C, rng);
  Vec out(B * T * C), changed(B * T * C), lse(B * T * NH), scratch;
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, scratch);
  for (int c = 0; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 1.0;  // perturb the last position
  attention_forward(changed.data(), lse.data(), qkv.data(), B, T, C, NH, NH, scratch);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(out[i], changed[i]);
}

// Softmax cross-entropy with the vocabulary split into shards exactly as tensor parallelism splits
// it: per-shard maxima combined by max, per-shard sums combined by addition.
class ShardedCrossEntropy {
 public:
  ShardedCrossEntropy(int N, int V, std::vector<int> shard_begins, int Vp)
      : N_(N), V_(V), begins_(std::move(shard_begins)), Vp_(Vp) {
    begins_.push_back(Vp);
  }
  int shard_width(int s) const { return begins_[s + 1] - begins_[s]; }
  int shards() const { return static_cast<int>(begins_.size()) - 1; }

  // logits: one (N, Vl_s) buffer per shard. Fills losses (N) and probs per shard.
  void forward(Vec& losses, std::vector<Vec>& probs, const std::vector<Vec>& logits,
               const std::vector<std::int32_t>& targets) {
    Vec row_max(N_, -INFINITY), part(N_), sum_exp(N_, 0.0), target_logit(N_, 0.0);
    for (int s = 0; s < shards(); ++s) {
      crossentropy_shard_max(part.data(), logits[s].data(), begins_[s], V_, N_, shard_width(s));
      for (int n = 0; n < N_; ++n) row_max[n] = std::max(row_max[n], part[n]);
    }
    Vec part_target(N_);
    for (int s = 0; s < shards(); ++s) {
      crossentropy_shard_sums(part.data(), part_target.data(), logits[s].data(), targets.data(),
                              row_max.data(), begins_[s], V_, N_, shard_width(s));
      for (int n = 0; n < N_; ++n) sum_exp[n] += part[n], target_logit[n] += part_target[n];
    }
    for (int s = 0; s < shards(); ++s) {
      probs[s].resize(static_cast<std::size_t>(N_) * shard_width(s));
      crossentropy_shard_finish(losses.data(), probs[s].data(), logits[s].data(), row_max.data(),
                                sum_exp.data(), target_logit.data(), begins_[s], V_, N_,
                                shard_width(s));
    }
  }

  void backward(std::vector<Vec>& dlogits, const std::vector<Vec>& probs,
                const std::vector<std::int32_t>& targets, const Vec& dlosses) {
    for (int s = 0; s < shards(); ++s) {
      dlogits[s].resize(probs[s].size());
      crossentropy_shard_backward(dlogits[s].data(), probs[s].data(), targets.data(),
                                  dlosses.data(), begins_[s], V_, N_, shard_width(s));
    }
  }

 private:
  int N_, V_;
  std::vector<int> begins_;
  int Vp_;
};

// Splits logits (N, Vp) into per-shard (N, Vl) buffers and back.
std::vector<Vec> split_columns(const Vec& full, int N, int Vp, const ShardedCrossEntropy& ce,
                               const std::vector<int>& begins) {
  std::vector<Vec> out(ce.shards());
  for (int s = 0; s < ce.shards(); ++s) {
    const int w = ce.shard_width(s);
    out[s].resize(static_cast<std::size_t>(N) * w);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < w; ++j) out[s][n * w + j] = full[n * Vp + begins[s] + j];
  }
  return out;
}

// Padded vocabulary (V = 5 real of Vp = 8), split 1 shard, 2 shards, and 3 uneven shards of which
// the last holds only padding.
TEST(OpsGradient, VocabParallelCrossEntropyWithPaddedVocabulary) {
  const int N = 3, V = 5, Vp = 8;
  const std::vector<std::int32_t> targets = {4, 0, 2};
  for (const std::vector<int>& begins :
       {std::vector<int>{0}, std::vector<int>{0, 4}, std::vector<int>{0, 2, 6}}) {
    std::mt19937_64 rng(7);
    Vec logits = random_vector(N * Vp, rng, 2.0);
    const Vec probe = random_vector(N, rng);
    ShardedCrossEntropy ce(N, V, begins, Vp);
    Vec losses(N);
    std::vector<Vec> probs(ce.shards());
    auto loss = [&] {
      ce.forward(losses, probs, split_columns(logits, N, Vp, ce, begins), targets);
      return dot(losses, probe);
    };
    loss();
    std::vector<Vec> dlogits(ce.shards());
    ce.backward(dlogits, probs, targets, probe);
    Vec dfull(N * Vp);
    for (int s = 0; s < ce.shards(); ++s)
      for (int n = 0; n < N; ++n)
        for (int j = 0; j < ce.shard_width(s); ++j)
          dfull[n * Vp + begins[s] + j] = dlogits[s][n * ce.shard_width(s) + j];
    SCOPED_TRACE(::testing::Message() << begins.size() << " shard(s)");
    expect_matches_finite_differences(logits, dfull, loss, "logits");
    for (int n = 0; n < N; ++n)
      for (int v = V; v < Vp; ++v)
        EXPECT_EQ(dfull[n * Vp + v], 0.0) << "padded column has a gradient";
  }
}

TEST(OpsGradient, CrossEntropyStaysFiniteWhenTheTargetProbabilityUnderflows) {
  const int N = 1, V = 3;
  std::vector<float> logits = {0.0f, 200.0f, 0.0f}, probs(3), losses(1), row_max(1), sum_exp(1),
                     target_logit(1);
  const std::int32_t target = 0;
  crossentropy_shard_max(row_max.data(), logits.data(), 0, V, N, V);
  crossentropy_shard_sums(sum_exp.data(), target_logit.data(), logits.data(), &target,
                          row_max.data(), 0, V, N, V);
  crossentropy_shard_finish(losses.data(), probs.data(), logits.data(), row_max.data(),
                            sum_exp.data(), target_logit.data(), 0, V, N, V);
  EXPECT_NEAR(losses[0], 200.0f, 1e-3f);
}

}  // namespace
}  // namespace strata::cpu
