// The blocked CPU attention (model/kernels/cpu/attention.h) against a plain double-precision
// reference that holds every score, and its chunk pairs against the whole sequence:
//   - whole sequences on separate q, k, v tensors and on the packed qkv: out, lse and the three
//     gradients, at lengths that take several query and key tiles (128) with ragged ends;
//   - the context-parallel pattern: a sequence cut into 2·cp chunks, each query chunk attended to
//     every key chunk at or before it apart (causal offsets), the partial outputs merged by their
//     log-sum-exps in the order a ring delivers them, and the backward pass run per chunk pair with
//     the merged rows' lse and D: the same out, lse and gradients as the whole sequence;
//   - rows that see no key (a negative offset): output 0 and lse −∞, which a merge ignores.
//
// Tolerances, max |difference| over max |reference| of the tensor: the reference computes in
// double with exact exponentials; the kernel in the tested type with exp_approx (about 2 ulp in
// float) and sums in another order. float 4e-6 [measured up to 1.0e-6, dK, on oneDNN], double
// 1e-12 [2.5e-15].
// Chunked against whole: the merge's rescaling adds a rounding or two per row: the same bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "model/kernels/cpu/attention.h"

namespace strata::cpu {
namespace {

// B sequences of T rows, NH query heads over KV key/value heads of size hs, in separate tensors:
// q (B, T, NH·hs), k and v (B, T, KV·hs), out and dq like q.
struct Heads {
  int B, T, NH, KV, hs;
  long q_width() const { return static_cast<long>(NH) * hs; }
  long kv_width() const { return static_cast<long>(KV) * hs; }
  long rows() const { return static_cast<long>(B) * T; }
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) +
           " KV " + std::to_string(KV) + " hs " + std::to_string(hs);
  }
};

template <class T>
struct Tensors {
  std::vector<T> q, k, v, dout;
};

template <class T>
Tensors<T> random_tensors(const Heads& s, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.5, 1.5);  // scores of order 1: peaked softmaxes
  const auto fill = [&](long n) {
    std::vector<T> values(static_cast<std::size_t>(n));
    for (T& x : values) x = static_cast<T>(dist(rng));
    return values;
  };
  return {fill(s.rows() * s.q_width()), fill(s.rows() * s.kv_width()),
          fill(s.rows() * s.kv_width()), fill(s.rows() * s.q_width())};
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Every score of every (sequence, head) in double: the definition the kernel blocks.
template <class T>
Reference reference(const Heads& s, const Tensors<T>& x) {
  Reference r;
  r.out.assign(s.rows() * s.q_width(), 0);
  r.lse.assign(s.rows() * s.NH, 0);
  r.dq.assign(r.out.size(), 0);
  r.dk.assign(s.rows() * s.kv_width(), 0);
  r.dv.assign(r.dk.size(), 0);
  const double scale = 1 / std::sqrt(static_cast<double>(s.hs));
  const auto q = [&](int b, int t, int h) {
    return x.q.data() + (b * s.T + t) * s.q_width() + h * s.hs;
  };
  const auto kv = [&](const std::vector<T>& m, int b, int t, int g) {
    return m.data() + (b * s.T + t) * s.kv_width() + g * s.hs;
  };
  const auto at_q = [&](int b, int t, int h) { return (b * s.T + t) * s.q_width() + h * s.hs; };
  const auto at_kv = [&](int b, int t, int g) { return (b * s.T + t) * s.kv_width() + g * s.hs; };
  std::vector<double> p(s.T), dp(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / (s.NH / s.KV);
      for (int t = 0; t < s.T; ++t) {
        double top = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += double(q(b, t, h)[d]) * kv(x.k, b, u, g)[d];
          p[u] = dot * scale;
          top = std::max(top, p[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) sum += std::exp(p[u] - top);
        const double lse = top + std::log(sum);
        r.lse[(b * s.NH + h) * s.T + t] = lse;
        for (int u = 0; u <= t; ++u) p[u] = std::exp(p[u] - lse);
        double delta = 0;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) {
            r.out[at_q(b, t, h) + d] += p[u] * kv(x.v, b, u, g)[d];
            dot += double(x.dout[at_q(b, t, h) + d]) * kv(x.v, b, u, g)[d];
          }
          dp[u] = dot;
          delta += p[u] * dot;
        }
        for (int u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - delta);
          for (int d = 0; d < s.hs; ++d) {
            r.dq[at_q(b, t, h) + d] += scale * ds * kv(x.k, b, u, g)[d];
            r.dk[at_kv(b, u, g) + d] += scale * ds * q(b, t, h)[d];
            r.dv[at_kv(b, u, g) + d] += p[u] * x.dout[at_q(b, t, h) + d];
          }
        }
      }
    }
  return r;
}

template <class T>
double relative_error(const std::vector<T>& actual, const std::vector<double>& expected) {
  double error = 0, scale = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    error = std::max(error, std::abs(static_cast<double>(actual[i]) - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return error / scale;
}

template <class T>
std::vector<double> widened(const std::vector<T>& values) {
  return {values.begin(), values.end()};
}

// The kernel's operands for rows [t0, t0 + rows) of every sequence of s.
template <class T>
AttentionRows<T> rows_of(T* data, const Heads& s, long width, int t0) {
  return {data + t0 * width, width, static_cast<long>(s.T) * width};
}
template <class T>
AttentionStats<T> stats_of(T* data, const Heads& s, int t0) {
  return {data + t0, s.T, static_cast<long>(s.NH) * s.T};
}

template <class T>
class BlockedAttention : public ::testing::Test {
 protected:
  static constexpr double kBound = std::is_same_v<T, float> ? 4e-6 : 1e-12;
};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(BlockedAttention, Types);

// Whole sequences, as separate tensors and packed: 300 rows are three query and key tiles, the
// last ragged; 128 is exactly one; 5 less than one.
TYPED_TEST(BlockedAttention, WholeSequencesMatchTheReference) {
  using T = TypeParam;
  std::mt19937_64 rng(21);
  for (const Heads s : {Heads{2, 300, 4, 2, 16}, Heads{1, 128, 2, 2, 8}, Heads{2, 5, 3, 1, 8}}) {
    SCOPED_TRACE(s.name());
    const Tensors<T> x = random_tensors<T>(s, rng);
    const Reference r = reference(s, x);
    const AttentionChunk whole{s.B, s.T, s.T, s.NH, s.KV, s.hs, 0};
    std::vector<T> out(r.out.size()), lse(r.lse.size()), delta(r.lse.size()), scratch;
    attention_chunk_forward<T>(rows_of(out.data(), s, s.q_width(), 0), stats_of(lse.data(), s, 0),
                               rows_of(x.q.data(), s, s.q_width(), 0),
                               rows_of(x.k.data(), s, s.kv_width(), 0),
                               rows_of(x.v.data(), s, s.kv_width(), 0), whole, scratch);
    EXPECT_LT(relative_error(out, r.out), this->kBound) << "out";
    EXPECT_LT(relative_error(lse, r.lse), this->kBound) << "lse";

    std::vector<T> dq(r.dq.size()), dk(r.dk.size()), dv(r.dv.size());
    attention_delta<T>(stats_of(delta.data(), s, 0), rows_of(x.dout.data(), s, s.q_width(), 0),
                       rows_of(out.data(), s, s.q_width(), 0), whole);
    attention_chunk_backward<T>(
        rows_of(dq.data(), s, s.q_width(), 0), rows_of(dk.data(), s, s.kv_width(), 0),
        rows_of(dv.data(), s, s.kv_width(), 0), rows_of(x.dout.data(), s, s.q_width(), 0),
        stats_of(lse.data(), s, 0), stats_of(delta.data(), s, 0),
        rows_of(x.q.data(), s, s.q_width(), 0), rows_of(x.k.data(), s, s.kv_width(), 0),
        rows_of(x.v.data(), s, s.kv_width(), 0), whole, ComputeDtype::fp32, scratch);
    EXPECT_LT(relative_error(dq, r.dq), this->kBound) << "dq";
    EXPECT_LT(relative_error(dk, r.dk), this->kBound) << "dk";
    EXPECT_LT(relative_error(dv, r.dv), this->kBound) << "dv";

    // The packed row [q | k | v] through the model's calls: the same values.
    const long C = s.q_width(), W = s.kv_width(), C3 = C + 2 * W;
    std::vector<T> qkv(s.rows() * C3), dqkv(qkv.size()), packed_out(out.size());
    for (long row = 0; row < s.rows(); ++row) {
      std::copy_n(x.q.begin() + row * C, C, qkv.begin() + row * C3);
      std::copy_n(x.k.begin() + row * W, W, qkv.begin() + row * C3 + C);
      std::copy_n(x.v.begin() + row * W, W, qkv.begin() + row * C3 + C + W);
    }
    attention_forward(packed_out.data(), lse.data(), qkv.data(), s.B, s.T, static_cast<int>(C),
                      s.NH, s.KV, scratch);
    EXPECT_EQ(packed_out, out);
    attention_backward(dqkv.data(), x.dout.data(), qkv.data(), packed_out.data(), lse.data(), s.B,
                       s.T, static_cast<int>(C), s.NH, s.KV, ComputeDtype::fp32, scratch);
    for (long row = 0; row < s.rows(); ++row) {
      ASSERT_TRUE(
          std::equal(dq.begin() + row * C, dq.begin() + (row + 1) * C, dqkv.begin() + row * C3));
      ASSERT_TRUE(std::equal(dk.begin() + row * W, dk.begin() + (row + 1) * W,
                             dqkv.begin() + row * C3 + C));
      ASSERT_TRUE(std::equal(dv.begin() + row * W, dv.begin() + (row + 1) * W,
                             dqkv.begin() + row * C3 + C + W));
    }
  }
}

// A sequence in 2·cp chunks of Tc rows, as context parallelism holds it: each query chunk against
// the key chunks at or before it, visited in ring order (its own first, then the previous ones,
// as the K/V chunks arrive), partial outputs merged, then each pair's backward with the merged
// rows' lse and D. Chunks of 75 rows: the diagonal pair is a ragged tile, the others full ones.
TYPED_TEST(BlockedAttention, ChunkPairsMergedMatchTheWholeSequence) {
  using T = TypeParam;
  std::mt19937_64 rng(22);
  for (const int cp : {1, 2, 4}) {
    const int chunks = 2 * cp, Tc = 150 / cp;
    const Heads s{2, chunks * Tc, 4, 2, 8};
    SCOPED_TRACE(s.name() + " cp " + std::to_string(cp));
    const Tensors<T> x = random_tensors<T>(s, rng);
    const Reference r = reference(s, x);
    const long C = s.q_width(), W = s.kv_width();
    std::vector<T> out(r.out.size()), lse(r.lse.size()), part(Tc * C * s.B), part_lse(r.lse.size());
    std::vector<T> scratch;
    // part and part_lse: (B, Tc, C) and (B, NH, Tc) of one chunk pair.
    const AttentionRows<T> part_rows{part.data(), C, static_cast<long>(Tc) * C};
    const AttentionStats<T> part_stats{part_lse.data(), Tc, static_cast<long>(s.NH) * Tc};
    for (int i = 0; i < chunks; ++i)
      for (int j = i; j >= 0; --j) {
        const AttentionChunk pair{s.B, Tc, Tc, s.NH, s.KV, s.hs, static_cast<long>(i - j) * Tc};
        const bool first = j == i;
        attention_chunk_forward<T>(
            first ? rows_of(out.data(), s, C, i * Tc) : part_rows,
            first ? stats_of(lse.data(), s, i * Tc) : part_stats, rows_of(x.q.data(), s, C, i * Tc),
            rows_of(x.k.data(), s, W, j * Tc), rows_of(x.v.data(), s, W, j * Tc), pair, scratch);
        if (!first)
          attention_merge<T>(rows_of(out.data(), s, C, i * Tc), stats_of(lse.data(), s, i * Tc),
                             {part.data(), C, static_cast<long>(Tc) * C},
                             {part_lse.data(), Tc, static_cast<long>(s.NH) * Tc}, pair);
      }
    EXPECT_LT(relative_error(out, r.out), this->kBound) << "out";
    EXPECT_LT(relative_error(lse, r.lse), this->kBound) << "lse";

    std::vector<T> delta(r.lse.size()), dq(r.dq.size()), dk(r.dk.size()), dv(r.dv.size());
    const AttentionChunk whole{s.B, s.T, s.T, s.NH, s.KV, s.hs, 0};
    attention_delta<T>(stats_of(delta.data(), s, 0), rows_of(x.dout.data(), s, C, 0),
                       rows_of(out.data(), s, C, 0), whole);
    for (int i = 0; i < chunks; ++i)
      for (int j = i; j >= 0; --j) {
        const AttentionChunk pair{s.B, Tc, Tc, s.NH, s.KV, s.hs, static_cast<long>(i - j) * Tc};
        attention_chunk_backward<T>(
            rows_of(dq.data(), s, C, i * Tc), rows_of(dk.data(), s, W, j * Tc),
            rows_of(dv.data(), s, W, j * Tc), rows_of(x.dout.data(), s, C, i * Tc),
            stats_of(lse.data(), s, i * Tc), stats_of(delta.data(), s, i * Tc),
            rows_of(x.q.data(), s, C, i * Tc), rows_of(x.k.data(), s, W, j * Tc),
            rows_of(x.v.data(), s, W, j * Tc), pair, ComputeDtype::fp32, scratch);
      }
    EXPECT_LT(relative_error(dq, r.dq), this->kBound) << "dq";
    EXPECT_LT(relative_error(dk, r.dk), this->kBound) << "dk";
    EXPECT_LT(relative_error(dv, r.dv), this->kBound) << "dv";
  }
}

// Query rows before every key (offset −3: rows 0-2 see nothing, row 3 sees key 0): output 0 and
// lse −∞ for the blind rows, and merging such a part changes nothing, bit for bit.
TYPED_TEST(BlockedAttention, RowsThatSeeNoKeyAreEmptyAndMergeAsNothing) {
  using T = TypeParam;
  std::mt19937_64 rng(23);
  const Heads s{1, 8, 2, 1, 4};
  const Tensors<T> x = random_tensors<T>(s, rng);
  const long C = s.q_width(), W = s.kv_width();
  std::vector<T> out(s.rows() * C), lse(s.rows() * s.NH), scratch;
  const AttentionChunk pair{s.B, s.T, s.T, s.NH, s.KV, s.hs, -3};
  attention_chunk_forward<T>(rows_of(out.data(), s, C, 0), stats_of(lse.data(), s, 0),
                             rows_of(x.q.data(), s, C, 0), rows_of(x.k.data(), s, W, 0),
                             rows_of(x.v.data(), s, W, 0), pair, scratch);
  for (int h = 0; h < s.NH; ++h)
    for (int t = 0; t < s.T; ++t) {
      const T row_lse = lse[h * s.T + t];
      if (t < 3) {
        EXPECT_EQ(row_lse, -std::numeric_limits<T>::infinity()) << t;
        for (int d = 0; d < s.hs; ++d) EXPECT_EQ(out[t * C + h * s.hs + d], T(0));
      } else {
        EXPECT_TRUE(std::isfinite(row_lse)) << t;
      }
    }
  // Row 3 sees key 0 alone: its output is v[0] exactly (a softmax over one key is 1).
  for (int d = 0; d < s.hs; ++d) EXPECT_EQ(out[3 * C + d], x.v[d]);

  // Merging the blind part into a full attention, and a full one into the blind part.
  const AttentionChunk whole{s.B, s.T, s.T, s.NH, s.KV, s.hs, 0};
  std::vector<T> full(out.size()), full_lse(lse.size());
  attention_chunk_forward<T>(rows_of(full.data(), s, C, 0), stats_of(full_lse.data(), s, 0),
                             rows_of(x.q.data(), s, C, 0), rows_of(x.k.data(), s, W, 0),
                             rows_of(x.v.data(), s, W, 0), whole, scratch);
  std::vector<T> merged = full, merged_lse = full_lse;
  const AttentionChunk three_rows{s.B, 3, 3, s.NH, s.KV, s.hs, 0};
  attention_merge<T>(rows_of(merged.data(), s, C, 0), stats_of(merged_lse.data(), s, 0),
                     rows_of<const T>(out.data(), s, C, 0), stats_of<const T>(lse.data(), s, 0),
                     three_rows);
  EXPECT_EQ(merged, full);
  EXPECT_EQ(merged_lse, full_lse);
  std::vector<T> blind = out, blind_lse = lse;
  attention_merge<T>(rows_of(blind.data(), s, C, 0), stats_of(blind_lse.data(), s, 0),
                     rows_of<const T>(full.data(), s, C, 0),
                     stats_of<const T>(full_lse.data(), s, 0), three_rows);
  for (int h = 0; h < s.NH; ++h)
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(blind_lse[h * s.T + t], full_lse[h * s.T + t]);
      for (int d = 0; d < s.hs; ++d)
        EXPECT_EQ(blind[t * C + h * s.hs + d], full[t * C + h * s.hs + d]);
    }
}

}  // namespace
}  // namespace strata::cpu
