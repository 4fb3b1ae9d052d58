// Context parallelism's attention (model/context_attention.h), run inside mpirun (2 and 4 ranks,
// the mesh's cp group the whole world, and at 4 ranks also cp 2 × dp 2, each data-parallel
// replica a cp group of its own; parallel/mesh/process_groups.h): every rank holds chunks r and
// 2·cp − 1 − r of each
// sequence and runs ContextAttention over the CPU's ops, ring and all_gather; its rows of the
// output, the lse and dqkv equal the whole sequence's attention on one rank (attention_forward and
// attention_backward of the same ops) within the chunked kernel's bound, the two ways of moving
// K/V agree bit for bit on the output, lse and dQ (they visit the blocks in the same order), and
// the bytes the communicator counted for each pass equal context_attention_bytes.
//
// Tolerance, max |difference| over max |reference| per tensor (float): the chunked attention sums
// over other key ranges and merges by lse, a few roundings per row: 4e-6, as in
// tests/unit/attention_chunks_test.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/context_attention.h"
#include "model/ops/cpu_ops.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/host_reduction.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/process_groups.h"

namespace strata {
namespace {

using Ops = CpuOps<float>;
using Heads = ContextAttention<Ops>::Heads;

// B sequences of 2·cp chunks of Tc rows; 4 query heads over 2 key/value heads of 8.
struct Case {
  int cp = 1, B = 2, Tc = 40;
  Heads h{4, 2, 8};
  int T() const { return 2 * cp * Tc; }
  int T_local() const { return 2 * Tc; }
};

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// This rank's rows of (B, T, width) sequence rows: chunks r and 2·cp − 1 − r of each sequence.
std::vector<float> local_rows(const std::vector<float>& whole, const Case& c, int rank,
                              long width) {
  std::vector<float> local;
  for (int b = 0; b < c.B; ++b)
    for (const int chunk : {rank, 2 * c.cp - 1 - rank}) {
      const auto first = whole.begin() + (static_cast<long>(b) * c.T() + chunk * c.Tc) * width;
      local.insert(local.end(), first, first + c.Tc * width);
    }
  return local;
}

// The same for per-(sequence, head) statistics (B, NH, T).
std::vector<float> local_stats(const std::vector<float>& whole, const Case& c, int rank) {
  std::vector<float> local;
  for (int bh = 0; bh < c.B * c.h.NH; ++bh)
    for (const int chunk : {rank, 2 * c.cp - 1 - rank}) {
      const auto first = whole.begin() + static_cast<long>(bh) * c.T() + chunk * c.Tc;
      local.insert(local.end(), first, first + c.Tc);
    }
  return local;
}

double relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  double error = 0, scale = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    error = std::max(error, std::fabs(static_cast<double>(actual[i]) - expected[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(expected[i])));
  }
  return error / scale;
}

std::uint64_t bytes_of(const CommStats& stats, const std::string& kind) {
  std::uint64_t total = 0;
  const auto found = stats.bytes.find(kind);
  if (found != stats.bytes.end())
    for (const auto& [link, bytes] : found->second) total += bytes;
  return total;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

// The whole sequences' attention on this rank alone.
Result whole_attention(Ops& ops, const Case& c, const std::vector<float>& qkv,
                       const std::vector<float>& dout) {
  const long C = c.h.C(), C3 = c.h.C3();
  const std::size_t rows = static_cast<std::size_t>(c.B) * c.T();
  Result r{std::vector<float>(rows * C), std::vector<float>(rows * c.h.NH),
           std::vector<float>(rows * C3)};
  ops.attention_forward(r.out.data(), r.lse.data(), qkv.data(), c.B, c.T(), static_cast<int>(C),
                        c.h.NH, c.h.KV);
  ops.attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), c.B,
                         c.T(), static_cast<int>(C), c.h.NH, c.h.KV);
  return r;
}

// The mesh's cp group (parallel/mesh/process_groups.h) of a world of cp·dp ranks: every dp
// replica attends its own sequences.
void expect_context_attention_matches(int cp) {
  MpiCommunicator job(MPI_COMM_WORLD, 8);
  ASSERT_EQ(job.size() % cp, 0);
  const MeshShape shape{1, 1, job.size() / cp, 1, cp};
  const ProcessGroups groups(Mesh(shape, job.rank(), 8), job);
  ASSERT_NE(groups.cp(), nullptr);
  Communicator& world = *groups.cp();
  EXPECT_EQ(groups.dp_cp().size(), job.size());
  EXPECT_EQ(groups.reductions().dp, &groups.dp_cp());
  Case c;
  c.cp = world.size();
  const int rank = world.rank();
  EXPECT_EQ(rank, groups.mesh().cp_rank());
  const long C = c.h.C(), C3 = c.h.C3();
  const std::size_t rows = static_cast<std::size_t>(c.B) * c.T();
  const int replica = groups.mesh().dp_rank();
  const std::vector<float> qkv = random_values(rows * C3, 31 + 2 * replica);
  const std::vector<float> dout = random_values(rows * C, 32 + 2 * replica);

  Ops ops(cpu::ComputeDtype::fp32);
  const Result whole = whole_attention(ops, c, qkv, dout);
  const std::vector<float> expected_out = local_rows(whole.out, c, rank, C);
  const std::vector<float> expected_lse = local_stats(whole.lse, c, rank);
  const std::vector<float> expected_dqkv = local_rows(whole.dqkv, c, rank, C3);

  const std::vector<float> my_qkv = local_rows(qkv, c, rank, C3);
  const std::vector<float> my_dout = local_rows(dout, c, rank, C);
  const std::size_t local = static_cast<std::size_t>(c.B) * c.T_local();
  Result results[2];
  for (const ContextComm comm : {ContextComm::ring, ContextComm::all_gather}) {
    SCOPED_TRACE(std::string(kContextCommChoices.word(comm)) + " cp " + std::to_string(c.cp));
    ContextAttention<Ops> attention(ops, world, comm, c.B, c.T_local(), c.h);
    Result& r = results[comm == ContextComm::ring ? 0 : 1];
    r.out.resize(local * C);
    r.lse.resize(local * c.h.NH);
    r.dqkv.resize(local * C3);
    const std::string kind = comm == ContextComm::ring ? "send" : "all_gather";
    const CommStats before = world.stats();
    attention.forward(r.out.data(), r.lse.data(), my_qkv.data(), c.B, c.T_local(), c.h);
    const CommStats forward = world.stats() - before;
    EXPECT_EQ(forward.total_bytes(), bytes_of(forward, kind));
    EXPECT_EQ(bytes_of(forward, kind), context_attention_bytes(comm, false, c.cp, c.B, c.T_local(),
                                                               c.h.KV, c.h.hs, sizeof(float)));
    attention.backward(r.dqkv.data(), my_dout.data(), my_qkv.data(), r.out.data(), r.lse.data(),
                       c.B, c.T_local(), c.h);
    const CommStats backward = world.stats() - before - forward;
    EXPECT_EQ(backward.total_bytes(), context_attention_bytes(comm, true, c.cp, c.B, c.T_local(),
                                                              c.h.KV, c.h.hs, sizeof(float)));
    if (comm == ContextComm::all_gather) {
      EXPECT_EQ(bytes_of(backward, "all_gather"), bytes_of(backward, "reduce_scatter"));
    }
    EXPECT_LT(relative_error(r.out, expected_out), 4e-6) << "out";
    EXPECT_LT(relative_error(r.lse, expected_lse), 4e-6) << "lse";
    EXPECT_LT(relative_error(r.dqkv, expected_dqkv), 4e-6) << "dqkv";
  }
  // The forward and dQ bit for bit; dK and dV are summed in other orders (along the ring, or each
  // member's part apart and then reduce-scattered).
  EXPECT_EQ(results[0].out, results[1].out);
  EXPECT_EQ(results[0].lse, results[1].lse);
  for (std::size_t row = 0; row < local; ++row)
    ASSERT_TRUE(std::equal(results[0].dqkv.begin() + row * C3,
                           results[0].dqkv.begin() + row * C3 + C,
                           results[1].dqkv.begin() + row * C3))
        << row;
}

// One member (a group of itself): both variants are the whole sequence's attention, in two
// chunks, with nothing sent.
TEST(ContextAttention, OneMemberAttendsItsTwoChunksAlone) {
  Case c;
  const long C = c.h.C(), C3 = c.h.C3();
  const std::size_t rows = static_cast<std::size_t>(c.B) * c.T();
  const std::vector<float> qkv = random_values(rows * C3, 41);
  const std::vector<float> dout = random_values(rows * C, 42);
  Ops ops(cpu::ComputeDtype::fp32);
  const Result whole = whole_attention(ops, c, qkv, dout);
  const std::vector<float>&out = whole.out, &lse = whole.lse, &dqkv = whole.dqkv;
  SingleRank alone;
  for (const ContextComm comm : {ContextComm::ring, ContextComm::all_gather}) {
    SCOPED_TRACE(kContextCommChoices.word(comm));
    ContextAttention<Ops> attention(ops, alone, comm, c.B, c.T(), c.h);
    std::vector<float> my_out(out.size()), my_lse(lse.size()), my_dqkv(dqkv.size());
    attention.forward(my_out.data(), my_lse.data(), qkv.data(), c.B, c.T(), c.h);
    attention.backward(my_dqkv.data(), dout.data(), qkv.data(), my_out.data(), my_lse.data(), c.B,
                       c.T(), c.h);
    EXPECT_LT(relative_error(my_out, out), 4e-6);
    EXPECT_LT(relative_error(my_lse, lse), 4e-6);
    EXPECT_LT(relative_error(my_dqkv, dqkv), 4e-6);
    EXPECT_EQ(context_attention_bytes(comm, true, 1, c.B, c.T(), c.h.KV, c.h.hs, 4), 0u);
  }
}

TEST(ContextAttention, RingAndAllGatherMatchTheWholeSequenceAndCountTheirBytes) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  expect_context_attention_matches(ranks);
}

// cp 2, the rest of the world data-parallel replicas, each with its cp group (at 4 ranks, two).
TEST(ContextAttention, EachDataParallelReplicaHasItsOwnGroup) {
  expect_context_attention_matches(2);
}

}  // namespace
}  // namespace strata
