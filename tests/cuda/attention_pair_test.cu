// Context parallelism's chunk pairs on the GPU (attention.h attention_pair_*) against the CPU's
// (model/kernels/cpu/attention.h attention_chunk_*), in the layouts model/context_attention.h
// gives them: query rows of a member's packed qkv (B, 2·Tc, C3) against a K/V block (B, 2·Tc,
// 2·KV·hs) whose rows are [k | v], out in (B, 2·Tc, C), statistics in (B, NH, 2·Tc); 4 query heads
// over 2 key/value heads (the cases: MatchesTheCpuChunkPairs). Forward out and lse, delta, and the
// backward's dq, dk, dv added to buffers that already hold values, on both kernel sets; within the
// tolerances of cuda_test_support.h.
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

constexpr int kB = 2, kNH = 4, kKV = 2, kHs = 32;
constexpr long kC = kNH * kHs, kKvWidth = 2L * kKV * kHs, kC3 = kC + kKvWidth;

// A member of chunks of Tc rows (its rows: 2·Tc of each sequence); query rows from chunk qi
// (Tq of them) against key rows from chunk kj of the block (Tk of them, possibly running into the
// next chunk), at `offset`.
struct Case {
  int Tc, qi, kj, Tq, Tk;
  long offset;
  int rows() const { return 2 * Tc; }
  std::string name() const {
    return "Tc " + std::to_string(Tc) + " q chunk " + std::to_string(qi) + " (" +
           std::to_string(Tq) + " rows) k chunk " + std::to_string(kj) + " (" + std::to_string(Tk) +
           " rows) offset " + std::to_string(offset);
  }
};

// The member's packed rows' strides, the block's for k and v.
AttentionPair pair_of(const Case& c) {
  AttentionPair p = packed_attention_pair(kB, c.rows(), kNH, kKV, kHs);
  p.Tq = c.Tq;
  p.Tk = c.Tk;
  p.causal_offset = c.offset;
  p.kv_row = kKvWidth;
  p.kv_batch = c.rows() * kKvWidth;
  return p;
}

cpu::AttentionChunk chunk_of(const AttentionPair& p) {
  return {p.B, p.Tq, p.Tk, p.NH, p.KV, p.hs, p.causal_offset};
}

template <class T>
void check_pair(const Case& c) {
  auto rng = test_rng();
  const long rows_total = static_cast<long>(kB) * c.rows();
  const std::vector<float> qkv = rounded<T>(random_floats(rows_total * kC3, rng, -1.5f, 1.5f));
  const std::vector<float> block =
      rounded<T>(random_floats(rows_total * kKvWidth, rng, -1.5f, 1.5f));
  const std::vector<float> dout = rounded<T>(random_floats(rows_total * kC, rng));
  // What the gradients hold before the pair adds to them (earlier pairs' sums), smaller than what
  // it adds so that the totals' errors are the sums'.
  const std::vector<float> dqkv0 = rounded<T>(random_floats(qkv.size(), rng, -0.1f, 0.1f));
  const std::vector<float> dblock0 = rounded<T>(random_floats(block.size(), rng, -0.1f, 0.1f));
  const AttentionPair pair = pair_of(c);
  const cpu::AttentionChunk chunk = chunk_of(pair);
  const long q_at = c.qi * c.Tc * kC3, out_at = c.qi * c.Tc * kC, stat_at = c.qi * c.Tc;
  const long kv_at = c.kj * c.Tc * kKvWidth, v_at = kv_at + kKV * kHs;
  const long R = c.rows();

  // Every buffer starts at zero (or the gradients' earlier sums) on both sides: the pair writes
  // only its rows, and the comparisons cover all of them.
  std::vector<float> out(rows_total * kC), lse(kB * kNH * R), delta(lse.size()), scratch;
  std::vector<float> dqkv = dqkv0, dblock = dblock0;
  const auto rows = [](auto* data, long at, long row, long batch) {
    return cpu::AttentionRows<std::remove_pointer_t<decltype(data)>>{data + at, row, batch};
  };
  const auto stats = [R](auto* data, long at) {
    return cpu::AttentionStats<std::remove_pointer_t<decltype(data)>>{data + at, R, kNH * R};
  };
  cpu::attention_chunk_forward<float>(
      rows(out.data(), out_at, kC, R * kC), stats(lse.data(), stat_at),
      rows(qkv.data(), q_at, kC3, R * kC3), rows(block.data(), kv_at, kKvWidth, R * kKvWidth),
      rows(block.data(), v_at, kKvWidth, R * kKvWidth), chunk, scratch);
  const std::vector<float> out_t = rounded<T>(out);  // the output as the GPU stores it
  cpu::attention_delta<float>(stats(delta.data(), stat_at), rows(dout.data(), out_at, kC, R * kC),
                              rows(out_t.data(), out_at, kC, R * kC), chunk);
  cpu::attention_chunk_backward<float>(
      rows(dqkv.data(), q_at, kC3, R * kC3), rows(dblock.data(), kv_at, kKvWidth, R * kKvWidth),
      rows(dblock.data(), v_at, kKvWidth, R * kKvWidth), rows(dout.data(), out_at, kC, R * kC),
      stats(lse.data(), stat_at), stats(delta.data(), stat_at),
      rows(qkv.data(), q_at, kC3, R * kC3), rows(block.data(), kv_at, kKvWidth, R * kKvWidth),
      rows(block.data(), v_at, kKvWidth, R * kKvWidth), chunk, cpu::ComputeDtype::fp32, scratch);

  for (AttentionKernels kernels :
       std::is_same_v<T, float>
           ? std::vector{AttentionKernels::tiles}
           : std::vector{AttentionKernels::registers, AttentionKernels::tiles}) {
    set_attention_kernels(kernels);
    const std::string where =
        std::string(kernels == AttentionKernels::registers ? "registers " : "tiles ") + c.name();
    DeviceBuffer<T> d_qkv(to_dtype<T>(qkv)), d_block(to_dtype<T>(block)), d_dout(to_dtype<T>(dout)),
        d_out(to_dtype<T>(std::vector<float>(out.size()))), d_dqkv(to_dtype<T>(dqkv0)),
        d_dblock(to_dtype<T>(dblock0));
    DeviceBuffer<float> d_lse(std::vector<float>(lse.size())),
        d_delta(std::vector<float>(delta.size()));
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

// Chunks below one tile (40 rows) and of several ragged tiles (150: the register kernels' 64-row
// tiles then have key tiles every query sees, and query tiles that start past a key tile's first
// query). Pairs: a chunk with itself (the diagonal), a later chunk against an earlier one (every
// key), offsets inside a tile and across tiles, and fewer queries than keys (the key tiles past
// every query's reach get no query tile at all).
TYPED_TEST(CudaAttentionPair, MatchesTheCpuChunkPairs) {
  for (const Case& c :
       {Case{40, 0, 0, 40, 40, 0}, Case{40, 1, 0, 40, 40, 120}, Case{40, 1, 1, 40, 40, 13},
        Case{40, 0, 0, 40, 80, 0}, Case{150, 0, 0, 150, 150, 0}, Case{150, 1, 0, 150, 150, 300},
        Case{150, 1, 1, 150, 150, 13}, Case{150, 1, 1, 150, 150, 70},
        Case{150, 0, 0, 100, 300, 30}})
    check_pair<TypeParam>(c);
}

}  // namespace
}  // namespace strata::cuda
