// Grouped-query attention (model/kernels/cpu/attention.h: NH query heads over KV key/value heads)
// against multi-head attention on the same heads spelled out: a reference qkv in which every
// key/value head is repeated for each query head of its group (Llama's repeat_kv), run through the
// same kernels with KV = NH, whose dK and dV are then summed over each group (the adjoint of the
// repeat). KV = 1 (multi-query), NH / 2 and NH, forward and backward, in float and double, with
// the probabilities unrounded (fp32) and rounded (bf16); the KV-cache rows (attention_forward_rows)
// against attention_forward's rows; and head counts that do not group.
//
// Tolerances, max |difference| over max |reference| of the tensor (measured on oneDNN and OpenBLAS
// in brackets, float):
//   out, dQ: the very same GEMMs and softmax on the same values, only at other strides: equal up to
//            how a GEMM library blocks a product of another leading dimension. float 1e-6 [0],
//            double 1e-14 [0].
//   dK, dV:  the kernel adds the group's products inside the GEMMs (beta = 1), the reference adds
//            the per-head products afterwards in double: one more rounding per query head of the
//            group, at most 4 here. float 1e-6 [8e-8, about 1.3 ulp], double 1e-14 [0].
//   decode:  attention_forward_rows runs its own query tiles (from t0), so its P·V products sum
//            over other lengths: float 2e-6 [3e-7 oneDNN, 0 OpenBLAS], double 1e-14 [0].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/precision.h"

namespace strata::cpu {
namespace {

struct Heads {
  int B, T, NH, KV, hs;
  int C() const { return NH * hs; }              // query channels, out's row
  int C3() const { return (NH + 2 * KV) * hs; }  // a grouped qkv row
  long rows() const { return static_cast<long>(B) * T; }
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) +
           " KV " + std::to_string(KV) + " hs " + std::to_string(hs);
  }
};

template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.5, 1.5);  // scores of order 1: peaked softmaxes
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// Grouped qkv (B, T, C3) → multi-head qkv (B, T, 3C): query heads as they are, key/value head
// h / (NH / KV) copied to head h.
template <class T>
std::vector<T> repeat_kv(const std::vector<T>& qkv, const Heads& s) {
  const int C = s.C(), group = s.NH / s.KV;
  std::vector<T> full(static_cast<std::size_t>(s.rows()) * 3 * C);
  for (long r = 0; r < s.rows(); ++r) {
    const T* src = qkv.data() + r * s.C3();
    T* dst = full.data() + r * 3 * C;
    std::copy_n(src, C, dst);
    for (int h = 0; h < s.NH; ++h) {
      const int kv = h / group;
      std::copy_n(src + C + kv * s.hs, s.hs, dst + C + h * s.hs);
      std::copy_n(src + C + (s.KV + kv) * s.hs, s.hs, dst + 2 * C + h * s.hs);
    }
  }
  return full;
}

// repeat_kv's adjoint: multi-head dqkv (B, T, 3C) → grouped (B, T, C3), each key/value head's dK
// and dV the sum (in double) of its group's query heads'.
template <class T>
std::vector<T> sum_kv_groups(const std::vector<T>& full, const Heads& s) {
  const int C = s.C(), group = s.NH / s.KV;
  std::vector<T> grouped(static_cast<std::size_t>(s.rows()) * s.C3());
  for (long r = 0; r < s.rows(); ++r) {
    const T* src = full.data() + r * 3 * C;
    T* dst = grouped.data() + r * s.C3();
    std::copy_n(src, C, dst);
    for (int kv = 0; kv < s.KV; ++kv)
      for (int d = 0; d < s.hs; ++d) {
        double dk = 0, dv = 0;
        for (int h = kv * group; h < (kv + 1) * group; ++h) {
          dk += src[C + h * s.hs + d];
          dv += src[2 * C + h * s.hs + d];
        }
        dst[C + kv * s.hs + d] = static_cast<T>(dk);
        dst[C + (s.KV + kv) * s.hs + d] = static_cast<T>(dv);
      }
  }
  return grouped;
}

// max |actual − expected| / max |expected| over columns [begin, end) of rows of `width`.
template <class T>
double relative_error(const std::vector<T>& actual, const std::vector<T>& expected, int width,
                      int begin, int end) {
  double error = 0, scale = 0;
  for (std::size_t row = 0; row < expected.size() / width; ++row)
    for (int c = begin; c < end; ++c) {
      const std::size_t i = row * width + c;
      error = std::max(error, std::abs(static_cast<double>(actual[i]) - expected[i]));
      scale = std::max(scale, std::abs(static_cast<double>(expected[i])));
    }
  return error / scale;
}

template <class T>
class CpuAttention : public ::testing::Test {
 protected:
  static constexpr bool kFloat = std::is_same_v<T, float>;
  static constexpr double kSameProducts = kFloat ? 1e-6 : 1e-14;  // out, dQ
  static constexpr double kGroupSums = kFloat ? 1e-6 : 1e-14;     // dK, dV
  static constexpr double kDecodedRows = kFloat ? 2e-6 : 1e-14;
};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuAttention, Types);

// One query tile (of 128 rows) with a ragged end, two sequences, groups of 4, 2 and 1.
TYPED_TEST(CpuAttention, GroupedHeadsMatchRepeatedKeyValueHeads) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (const int KV : {1, 2, 4}) {
    const Heads s{2, 70, 4, KV, 8};
    SCOPED_TRACE(s.name());
    const int C = s.C();
    const auto qkv = random_values<T>(s.rows() * s.C3(), rng);
    const auto dout = random_values<T>(s.rows() * C, rng);
    const auto full = repeat_kv(qkv, s);
    std::vector<T> scratch, out(s.rows() * C), expected_out(s.rows() * C);
    std::vector<T> lse(s.rows() * s.NH), expected_lse(s.rows() * s.NH);
    attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH, s.KV, scratch);
    attention_forward(expected_out.data(), expected_lse.data(), full.data(), s.B, s.T, C, s.NH,
                      s.NH, scratch);
    EXPECT_LT(relative_error(out, expected_out, C, 0, C), this->kSameProducts);
    EXPECT_LT(relative_error(lse, expected_lse, s.T, 0, s.T), this->kSameProducts);

    for (const ComputeDtype probs : {ComputeDtype::fp32, ComputeDtype::bf16}) {
      SCOPED_TRACE(compute_dtype_name(probs));
      std::vector<T> dqkv(s.rows() * s.C3()), full_dqkv(s.rows() * 3 * C);
      attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, C,
                         s.NH, s.KV, probs, scratch);
      attention_backward(full_dqkv.data(), dout.data(), full.data(), expected_out.data(),
                         expected_lse.data(), s.B, s.T, C, s.NH, s.NH, probs, scratch);
      const auto expected = sum_kv_groups(full_dqkv, s);
      EXPECT_LT(relative_error(dqkv, expected, s.C3(), 0, C), this->kSameProducts) << "dQ";
      EXPECT_LT(relative_error(dqkv, expected, s.C3(), C, C + s.KV * s.hs), this->kGroupSums)
          << "dK";
      EXPECT_LT(relative_error(dqkv, expected, s.C3(), C + s.KV * s.hs, s.C3()), this->kGroupSums)
          << "dV";
      // KV = NH: the repeat is the identity and the sums have one term, the same call twice.
      if (KV == s.NH) {
        EXPECT_EQ(dqkv, expected);
      }
    }
    if (KV == s.NH) {
      EXPECT_EQ(out, expected_out);
    }
  }
}

// KV-cache decoding over grouped heads: rows [t0, T) attending over the cached rows before them
// are attention_forward's rows [t0, T) of the whole sequence.
TYPED_TEST(CpuAttention, DecodedRowsMatchTheFullForward) {
  using T = TypeParam;
  std::mt19937_64 rng(12);
  for (const int KV : {1, 2, 4})
    for (const int t0 : {0, 5, 64, 69}) {
      const Heads s{1, 70, 4, KV, 8};
      SCOPED_TRACE(s.name() + " t0 " + std::to_string(t0));
      const int C = s.C();
      const auto qkv = random_values<T>(s.rows() * s.C3(), rng);
      std::vector<T> scratch, out(s.rows() * C), lse(s.rows() * s.NH), rows((s.T - t0) * C);
      attention_forward(out.data(), lse.data(), qkv.data(), 1, s.T, C, s.NH, s.KV, scratch);
      attention_forward_rows(rows.data(), qkv.data(), t0, s.T, C, s.NH, s.KV);
      const std::vector<T> expected(out.begin() + static_cast<long>(t0) * C, out.end());
      EXPECT_LT(relative_error(rows, expected, C, 0, C), this->kDecodedRows);
    }
}

TYPED_TEST(CpuAttention, HeadsThatDoNotGroupAreAnError) {
  using T = TypeParam;
  std::vector<T> qkv(2 * 4 * 10), out(2 * 4 * 4), lse(2 * 4), scratch;
  // 4 query heads cannot share 3 key/value heads, nor 0.
  for (const int KV : {3, 0}) {
    EXPECT_THROW(attention_forward(out.data(), lse.data(), qkv.data(), 1, 2, 4, 4, KV, scratch),
                 Error)
        << KV;
    EXPECT_THROW(attention_forward_rows(out.data(), qkv.data(), 1, 2, 4, 4, KV), Error) << KV;
    EXPECT_THROW(attention_backward(qkv.data(), out.data(), qkv.data(), out.data(), lse.data(), 1,
                                    2, 4, 4, KV, ComputeDtype::fp32, scratch),
                 Error)
        << KV;
  }
}

}  // namespace
}  // namespace strata::cpu
