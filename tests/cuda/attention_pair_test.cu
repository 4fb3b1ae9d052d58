// Context parallelism's chunk pairs on the GPU (attention.h attention_pair_*) against the CPU's
// (model/kernels/cpu/attention.h attention_chunk_*), in the layouts model/context_attention.h
// gives them: query rows of a member's packed qkv (B, 2·Tc, C3) against a K/V block (B, 2·Tc,
// 2·KV·hs) whose rows are [k | v], out in (B, 2·Tc, C), statistics in (B, NH, 2·Tc). Tc = 40 (a
// partial tile), 4 query heads over 2 key/value heads. Pairs: a chunk with itself (offset 0, the
// diagonal), a later chunk against an earlier one (offset ≥ Tk − 1: every key seen), and an offset
// that falls inside a tile (13). Forward out and lse, delta, and the backward's dq, dk, dv added to
// buffers that already hold values, on both kernel sets; within the tolerances of
// cuda_test_support.h.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cuda/attention.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaAttentionPair : public ::testing::Test {
 protected:
  ~CudaAttentionPair() override { set_attention_kernels(AttentionKernels::registers); }
};
TYPED_TEST_SUITE(CudaAttentionPair, ComputeDtypes, DtypeName);

constexpr int kB = 2, kTc = 40, kRows = 2 * kTc, kNH = 4, kKV = 2, kHs = 32;
constexpr long kC = kNH * kHs, kKvWidth = 2L * kKV * kHs, kC3 = kC + kKvWidth;

// A query chunk of the member's rows against a key chunk of the block (the bases say which): the
// member's packed rows' strides, but Tc rows against Tc keys of the block's.
AttentionPair pair_of(long offset) {
  AttentionPair p = packed_attention_pair(kB, kRows, kNH, kKV, kHs);
  p.Tq = p.Tk = kTc;
  p.causal_offset = offset;
  p.kv_row = kKvWidth;
  p.kv_batch = kRows * kKvWidth;
  return p;
}

cpu::AttentionChunk chunk_of(const AttentionPair& p) {
  return {p.B, p.Tq, p.Tk, p.NH, p.KV, p.hs, p.causal_offset};
}

template <class T>
void check_pair(int qi, int kj, long offset) {
  auto rng = test_rng();
  const std::vector<float> qkv = rounded<T>(random_floats(kB * kRows * kC3, rng, -1.5f, 1.5f));
  const std::vector<float> block =
      rounded<T>(random_floats(kB * kRows * kKvWidth, rng, -1.5f, 1.5f));
  const std::vector<float> dout = rounded<T>(random_floats(kB * kRows * kC, rng));
  // What the gradients hold before the pair adds to them (earlier pairs' sums), smaller than what
  // it adds so that the totals' errors are the sums'.
  const std::vector<float> dqkv0 = rounded<T>(random_floats(qkv.size(), rng, -0.1f, 0.1f));
  const std::vector<float> dblock0 = rounded<T>(random_floats(block.size(), rng, -0.1f, 0.1f));
  const AttentionPair pair = pair_of(offset);
  const cpu::AttentionChunk chunk = chunk_of(pair);
  const long q_at = qi * kTc * kC3, out_at = qi * kTc * kC, stat_at = qi * kTc;
  const long kv_at = kj * kTc * kKvWidth, v_at = kv_at + kKV * kHs;

  std::vector<float> out(kB * kRows * kC), lse(kB * kNH * kRows), delta(lse.size()), scratch;
  std::vector<float> dqkv = dqkv0, dblock = dblock0;
  const auto rows = [](auto* data, long at, long row, long batch) {
    return cpu::AttentionRows<std::remove_pointer_t<decltype(data)>>{data + at, row, batch};
  };
  const auto stats = [](auto* data, long at) {
    return cpu::AttentionStats<std::remove_pointer_t<decltype(data)>>{data + at, kRows,
                                                                      kNH * kRows};
  };
  cpu::attention_chunk_forward<float>(
      rows(out.data(), out_at, kC, kRows * kC), stats(lse.data(), stat_at),
      rows(qkv.data(), q_at, kC3, kRows * kC3),
      rows(block.data(), kv_at, kKvWidth, kRows * kKvWidth),
      rows(block.data(), v_at, kKvWidth, kRows * kKvWidth), chunk, scratch);
  const std::vector<float> out_t = rounded<T>(out);  // the output as the GPU stores it
  cpu::attention_delta<float>(stats(delta.data(), stat_at),
                              rows(dout.data(), out_at, kC, kRows * kC),
                              rows(out_t.data(), out_at, kC, kRows * kC), chunk);
  cpu::attention_chunk_backward<float>(rows(dqkv.data(), q_at, kC3, kRows * kC3),
                                       rows(dblock.data(), kv_at, kKvWidth, kRows * kKvWidth),
                                       rows(dblock.data(), v_at, kKvWidth, kRows * kKvWidth),
                                       rows(dout.data(), out_at, kC, kRows * kC),
                                       stats(lse.data(), stat_at), stats(delta.data(), stat_at),
                                       rows(qkv.data(), q_at, kC3, kRows * kC3),
                                       rows(block.data(), kv_at, kKvWidth, kRows * kKvWidth),
                                       rows(block.data(), v_at, kKvWidth, kRows * kKvWidth), chunk,
                                       cpu::ComputeDtype::fp32, scratch);

  for (AttentionKernels kernels :
       std::is_same_v<T, float>
           ? std::vector{AttentionKernels::tiles}
           : std::vector{AttentionKernels::registers, AttentionKernels::tiles}) {
    set_attention_kernels(kernels);
    const std::string where =
        std::string(kernels == AttentionKernels::registers ? "registers" : "tiles") + " q chunk " +
        std::to_string(qi) + " k chunk " + std::to_string(kj) + " offset " + std::to_string(offset);
    DeviceBuffer<T> d_qkv(to_dtype<T>(qkv)), d_block(to_dtype<T>(block)), d_dout(to_dtype<T>(dout)),
        d_out(out.size()), d_dqkv(to_dtype<T>(dqkv0)), d_dblock(to_dtype<T>(dblock0));
    DeviceBuffer<float> d_lse(lse.size()), d_delta(delta.size());
    attention_pair_forward(d_out.get() + out_at, d_lse.get() + stat_at, d_qkv.get() + q_at,
                           d_block.get() + kv_at, d_block.get() + v_at, pair, nullptr);
    attention_pair_delta(d_delta.get() + stat_at, d_dout.get() + out_at, d_out.get() + out_at, pair,
                         nullptr);
    attention_pair_backward(d_dqkv.get() + q_at, d_dblock.get() + kv_at, d_dblock.get() + v_at,
                            d_dout.get() + out_at, d_lse.get() + stat_at, d_delta.get() + stat_at,
                            d_qkv.get() + q_at, d_block.get() + kv_at, d_block.get() + v_at, pair,
                            nullptr);
    EXPECT_LT(relative_error(to_floats(d_out.download()), out), tolerance<T>()) << where;
    const double stat_tolerance = std::is_same_v<T, float> ? kFp32Tolerance : 1e-4;
    EXPECT_LT(relative_error(d_lse.download(), lse), stat_tolerance) << where;
    EXPECT_LT(relative_error(d_delta.download(), delta), tolerance<T>()) << where;
    // The totals, and that the pair did add to them (far more than the tolerance).
    const std::vector<float> got_dqkv = to_floats(d_dqkv.download());
    const std::vector<float> got_dblock = to_floats(d_dblock.download());
    EXPECT_LT(relative_error(got_dqkv, dqkv), tolerance<T>()) << where << " dq";
    EXPECT_LT(relative_error(got_dblock, dblock), tolerance<T>()) << where << " dk, dv";
    EXPECT_GT(relative_error(dqkv0, dqkv), 10 * tolerance<T>()) << where;
    EXPECT_GT(relative_error(dblock0, dblock), 10 * tolerance<T>()) << where;
  }
}

TYPED_TEST(CudaAttentionPair, MatchesTheCpuChunkPairs) {
  check_pair<TypeParam>(0, 0, 0);        // a chunk with itself: the diagonal
  check_pair<TypeParam>(1, 0, 3 * kTc);  // a later chunk against an earlier one: every key
  check_pair<TypeParam>(1, 1, 13);       // an offset inside a tile
}

}  // namespace
}  // namespace strata::cuda
