// The GPU's merge of partial attentions (model/kernels/cuda/attention_merge.h) against the CPU's
// (model/kernels/cpu/attention.h), on partials the CPU's chunk pairs computed and rounded to the
// dtype: query rows 20-39 of two sequences against keys 0-19 (all visible) and keys 20-39 (the
// diagonal), in strided layouts (lse of 40 rows per head, only 20 of them merged). The merged
// output within the relative error norm of cuda_test_support.h (one rounding of each value), the
// merged lse within the fp32 bound; and a part whose rows saw no key (lse −∞) leaves the output
// and lse unchanged, bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cuda/attention_merge.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaAttentionMerge : public ::testing::Test {};
TYPED_TEST_SUITE(CudaAttentionMerge, ComputeDtypes, DtypeName);

constexpr int kB = 2, kT = 40, kTq = 20, kNH = 2, kKV = 1, kHs = 16;
constexpr long kC = kNH * kHs, kKVW = kKV * kHs;

// Query rows [20, 40) against key rows [k0, k0 + 20) with `offset`: out (B, 40, C) rows 20-39,
// lse (B, NH, 40) rows 20-39.
void partial(std::vector<float>& out, std::vector<float>& lse, const std::vector<float>& q,
             const std::vector<float>& k, const std::vector<float>& v, int k0, long offset) {
  std::vector<float> scratch;
  const cpu::AttentionChunk pair{kB, kTq, kTq, kNH, kKV, kHs, offset};
  cpu::attention_chunk_forward<float>(
      {out.data() + kTq * kC, kC, kT * kC}, {lse.data() + kTq, kT, kNH * kT},
      {q.data() + kTq * kC, kC, kT * kC}, {k.data() + k0 * kKVW, kKVW, kT * kKVW},
      {v.data() + k0 * kKVW, kKVW, kT * kKVW}, pair, scratch);
}

TYPED_TEST(CudaAttentionMerge, MatchesCpuAndIgnoresRowsThatSawNoKey) {
  using T = TypeParam;
  auto rng = test_rng();
  const std::vector<float> q = random_floats(kB * kT * kC, rng, -1.5f, 1.5f);
  const std::vector<float> k = random_floats(kB * kT * kKVW, rng, -1.5f, 1.5f);
  const std::vector<float> v = random_floats(kB * kT * kKVW, rng);
  std::vector<float> out(kB * kT * kC), lse(kB * kNH * kT), part(out.size()), part_lse(lse.size());
  partial(out, lse, q, k, v, 0, kTq);        // keys 0-19: every one visible
  partial(part, part_lse, q, k, v, kTq, 0);  // keys 20-39: the diagonal
  out = rounded<T>(out);
  part = rounded<T>(part);

  const AttentionMergeShape shape{kB, kTq, kNH, kHs, kC, kT * kC, kT, kNH * kT};
  std::vector<float> expected = out, expected_lse = lse;
  cpu::attention_merge<float>(
      {expected.data() + kTq * kC, kC, kT * kC}, {expected_lse.data() + kTq, kT, kNH * kT},
      {part.data() + kTq * kC, kC, kT * kC}, {part_lse.data() + kTq, kT, kNH * kT},
      {kB, kTq, kTq, kNH, kKV, kHs, 0});
  DeviceBuffer<T> d_out(to_dtype<T>(out)), d_part(to_dtype<T>(part));
  DeviceBuffer<float> d_lse(lse), d_part_lse(part_lse);
  attention_merge(d_out.get() + kTq * kC, d_lse.get() + kTq, d_part.get() + kTq * kC,
                  d_part_lse.get() + kTq, shape, nullptr);
  EXPECT_LT(relative_error(to_floats(d_out.download()), expected), tolerance<T>());
  EXPECT_LT(relative_error(d_lse.download(), expected_lse), kFp32Tolerance);

  // Rows that saw no key: query rows 20-39 against keys 20-39 at offset −25 see none.
  std::vector<float> blind(out.size()), blind_lse(lse.size(), 0.0f);
  partial(blind, blind_lse, q, k, v, kTq, -25);
  const std::vector<float> before_out = to_floats(d_out.download());
  const std::vector<float> before_lse = d_lse.download();
  DeviceBuffer<T> d_blind(to_dtype<T>(blind));
  DeviceBuffer<float> d_blind_lse(blind_lse);
  attention_merge(d_out.get() + kTq * kC, d_lse.get() + kTq, d_blind.get() + kTq * kC,
                  d_blind_lse.get() + kTq, shape, nullptr);
  EXPECT_EQ(to_floats(d_out.download()), before_out);
  EXPECT_EQ(d_lse.download(), before_lse);
}

}  // namespace
}  // namespace strata::cuda
