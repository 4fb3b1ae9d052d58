// Expert parallelism's exchange (model/moe/moe_exchange.h) with ranks as threads of one process
// (tests/support/thread_group.h), so it runs under the sanitizer builds: the counts and the
// expert-major order on hand-built routings, dispatch then combine returning every row home, the
// byte payload moving the rows the typed exchange moves, and an MoE layer whose experts are split
// over 2 and 4 ranks computing, in double precision, what the whole layer computes for each rank's
// tokens (outputs, input and router gradients; expert gradients equal to the whole layer's summed
// over the ranks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "model/moe/moe_exchange.h"
#include "model/moe/moe_layer.h"
#include "tests/support/thread_group.h"

namespace strata {
namespace {

using testing::ThreadGroup;
using testing::ThreadRank;

// A routing of `tokens` tokens, top-1, whose token t chose expert experts_of[t], nothing dropped.
MoeRouting routing_of(const std::vector<int>& experts_of, int experts) {
  const std::vector<int>& choices = experts_of;
  const int tokens = static_cast<int>(choices.size());
  return route_tokens(choices.data(), tokens, 1, experts, std::max(tokens, 1), -1);
}

TEST(MoeExchange, CountsAndExpertMajorOrderOnHandBuiltRoutings) {
  // 2 ranks, 4 experts (rank 0 holds 0-1, rank 1 holds 2-3).
  const std::vector<std::vector<int>> choices = {{0, 3, 1, 0, 2}, {1, 1, 3, 0}};
  ThreadGroup group(2);
  std::vector<MoeExchange> plans(2);
  group.run([&](int rank) {
    ThreadRank me(group, rank);
    plans[static_cast<std::size_t>(rank)] =
        plan_moe_exchange(routing_of(choices[static_cast<std::size_t>(rank)], 4), me);
  });
  // Rank 0 sends its experts-0/1 rows (3) to itself and its experts-2/3 rows (2) to rank 1.
  EXPECT_EQ(plans[0].sent_rows, (std::vector<std::size_t>{3, 2}));
  EXPECT_EQ(plans[1].sent_rows, (std::vector<std::size_t>{3, 1}));
  EXPECT_EQ(plans[0].received_rows, (std::vector<std::size_t>{3, 3}));
  EXPECT_EQ(plans[1].received_rows, (std::vector<std::size_t>{2, 1}));
  // Rank 0's received rows, member-major: [r0: e0 e0 e1 | r1: e0 e1 e1]; expert-major: expert 0
  // from rank 0 (rows 0, 1) then rank 1 (row 3), expert 1 from rank 0 (2) then rank 1 (4, 5).
  EXPECT_EQ(plans[0].order, (std::vector<int>{0, 1, 3, 2, 4, 5}));
  EXPECT_EQ(plans[0].expert_offsets, (std::vector<int>{0, 3, 6}));
  // Rank 1's: [r0: e2 e3 | r1: e3]: expert 2 (row 0), expert 3 from rank 0 (1) then rank 1 (2).
  EXPECT_EQ(plans[1].order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plans[1].expert_offsets, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(plans[0].rows_to_others(0) + plans[0].rows_from_others(0), 2u + 3u);
}

TEST(MoeExchange, DispatchThenCombineBringsEveryRowHome) {
  const std::vector<std::vector<int>> choices = {{5, 0, 7, 2, 2, 6}, {3, 1}, {}, {4, 4, 0, 7}};
  ThreadGroup group(4);
  group.run([&](int rank) {
    ThreadRank me(group, rank);
    const MoeRouting routing = routing_of(choices[static_cast<std::size_t>(rank)], 8);
    const MoeExchange x = plan_moe_exchange(routing, me);
    const int width = 3;
    std::vector<double> rows(routing.assignments.size() * width);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = 100.0 * rank + static_cast<double>(i);
    std::vector<double> at_experts, home;
    moe_dispatch(x, me, rows.data(), width, at_experts);
    // Every row at an expert this rank holds: expert e = rank·2 + j.
    for (int j = 0; j < x.experts_per_member; ++j)
      EXPECT_EQ(x.expert_rows(j), [&] {
        int n = 0;
        for (const auto& c : choices)
          for (int e : c) n += e == rank * 2 + j;
        return n;
      }());
    moe_combine(x, me, at_experts.data(), width, home);
    home.resize(rows.size());
    EXPECT_EQ(home, rows) << "rank " << rank;
  });
}

// The byte payload (a CUDA model's rows of 16-bit or fp32 values, width in bytes) moves each row's
// exact bytes to where the typed exchange moves the row.
TEST(MoeExchange, BytePayloadMovesTheRowsTheTypedExchangeMoves) {
  const std::vector<std::vector<int>> choices = {{3, 0, 2, 2}, {1, 3, 3}};
  ThreadGroup group(2);
  group.run([&](int rank) {
    ThreadRank me(group, rank);
    const MoeRouting routing = routing_of(choices[static_cast<std::size_t>(rank)], 4);
    const MoeExchange x = plan_moe_exchange(routing, me);
    const int width = 5;
    std::vector<float> rows(routing.assignments.size() * width);
    for (std::size_t i = 0; i < rows.size(); ++i)
      rows[i] = 0.25f * static_cast<float>(i) + 10.0f * static_cast<float>(rank);
    std::vector<float> typed;
    moe_dispatch(x, me, rows.data(), width, typed);
    std::vector<std::uint8_t> bytes(rows.size() * sizeof(float)), moved, home;
    std::memcpy(bytes.data(), rows.data(), bytes.size());
    const int row_bytes = width * static_cast<int>(sizeof(float));
    moe_dispatch(x, me, bytes.data(), row_bytes, moved);
    const std::size_t R = static_cast<std::size_t>(x.received()) * width;
    ASSERT_GE(moved.size(), R * sizeof(float));
    std::vector<float> arrived(R);
    std::memcpy(arrived.data(), moved.data(), R * sizeof(float));
    typed.resize(R);
    EXPECT_EQ(arrived, typed) << "rank " << rank;
    moe_combine(x, me, moved.data(), row_bytes, home);
    home.resize(bytes.size());
    EXPECT_EQ(home, bytes) << "rank " << rank;
  });
}

class SplitExperts : public ::testing::TestWithParam<int> {};

TEST_P(SplitExperts, ComputeTheWholeLayerForEachRanksTokens) {
  const int P = GetParam();
  constexpr int C = 8, E = 8, T = 4, N = 3 * T;
  const int El = E / P;
  MoeConfig config;
  config.experts = E;
  config.top_k = 2;
  config.capacity_factor = 1.0;
  config.aux_loss = 0.05;
  config.z_loss = 0.01;
  const MoeWeightOffsets whole(C, E, 4 * C), held(C, E, 4 * C, static_cast<std::size_t>(El));
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 0.3);
  std::vector<double> weights(whole.total());
  for (double& w : weights) w = normal(rng);
  std::vector<std::vector<double>> xs(static_cast<std::size_t>(P)), dys(xs.size());
  for (int r = 0; r < P; ++r)
    for (auto* v : {&xs[static_cast<std::size_t>(r)], &dys[static_cast<std::size_t>(r)]}) {
      v->resize(static_cast<std::size_t>(N) * C);
      for (double& value : *v) value = normal(rng) * 3;
    }
  // The whole layer on each rank's tokens, one after the other; its expert gradients summed.
  const MoeLayer<double> one(MoeExpertShape::gpt2(C), config);
  std::vector<std::vector<double>> y1(xs.size()), dx1(xs.size()), router1(xs.size());
  std::vector<double> experts1(whole.total(), 0.0);
  for (std::size_t r = 0; r < xs.size(); ++r) {
    MoeActivations<double> a;
    y1[r].resize(xs[r].size());
    dx1[r].resize(xs[r].size());
    std::vector<double> g(whole.total(), 0.0);
    one.forward(a, xs[r].data(), N, T, weights.data(), y1[r].data());
    one.backward_input(a, dys[r].data(), 1.0, weights.data(), dx1[r].data());
    one.backward_weight(a, g.data(), 0, N);
    router1[r].assign(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(whole.expert(0)));
    for (std::size_t i = whole.expert(0); i < g.size(); ++i) experts1[i] += g[i];
  }
  ThreadGroup group(P);
  group.run([&](int rank) {
    const std::size_t r = static_cast<std::size_t>(rank);
    ThreadRank me(group, rank);
    std::vector<double> mine(weights.begin(),
                             weights.begin() + static_cast<std::ptrdiff_t>(whole.expert(0)));
    mine.insert(mine.end(), weights.begin() + static_cast<std::ptrdiff_t>(whole.expert(rank * El)),
                weights.begin() + static_cast<std::ptrdiff_t>(whole.expert((rank + 1) * El)));
    const MoeLayer<double> split(MoeExpertShape::gpt2(C), config, nullptr, cpu::ComputeDtype::fp32,
                                 &me);
    MoeActivations<double> a;
    std::vector<double> y(xs[r].size()), dx(y.size()), g(held.total(), 0.0);
    split.forward(a, xs[r].data(), N, T, mine.data(), y.data());
    split.backward_input(a, dys[r].data(), 1.0, mine.data(), dx.data());
    split.backward_weight(a, g.data(), 0, N);
    for (std::size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], y1[r][i], 1e-12) << "rank " << rank << " y " << i;
      EXPECT_NEAR(dx[i], dx1[r][i], 1e-12) << "rank " << rank << " dx " << i;
    }
    for (std::size_t i = 0; i < held.expert(0); ++i)
      EXPECT_NEAR(g[i], router1[r][i], 1e-12) << "rank " << rank << " router " << i;
    const std::size_t first = whole.expert(rank * El);
    for (std::size_t i = held.expert(0); i < held.total(); ++i)
      EXPECT_NEAR(g[i], experts1[first + i - held.expert(0)], 1e-11)
          << "rank " << rank << " expert element " << i;
    EXPECT_GT(a.stats.dropped, 0) << "the capacity should drop some choices";
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SplitExperts, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace strata
