// Expert parallelism's token exchange (model/moe/moe_exchange.h), run inside mpirun (4 ranks, nodes
// of 2): an MoE layer whose 8 experts are split over the 4 ranks, each rank routing its own tokens,
// computes what the whole layer computes for those tokens (outputs, input gradients, router
// gradients; expert gradients equal to the whole layer's summed over the ranks' tokens), and its
// communicator counts exactly the all-to-all bytes that the exchanged token counts give: the
// counts (E/P ints to each other member), then per direction the rows sent (C floats each), per
// peer and link class.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "model/moe/moe_layer.h"
#include "parallel/comm/mpi_communicator.h"

namespace strata {
namespace {

std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_near_all(const float* got, const float* want, std::size_t n, const char* what) {
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << what << " element " << i;
}

class MoeExchangeTest : public ::testing::TestWithParam<double> {};

TEST_P(MoeExchangeTest, SplitExpertsComputeTheWholeLayerAndCountTheirBytes) {
  MpiCommunicator world(MPI_COMM_WORLD, 2);
  const int P = world.size(), me = world.rank();
  constexpr int C = 16, E = 8, T = 8, sequences = 2, N = T * sequences;
  const int El = E / P;
  ASSERT_EQ(E % P, 0);
  MoeConfig config;
  config.experts = E;
  config.top_k = 2;
  config.capacity_factor = GetParam();  // 1.0 drops choices, 0 is dropless
  config.aux_loss = 0.05;
  config.z_loss = 0.01;
  const MoeWeightOffsets whole(C, E, 4 * C), held(C, E, 4 * C, static_cast<std::size_t>(El));
  // The whole layer's weights, the same on every rank; this rank's: the router and its experts.
  std::vector<float> weights = normal(whole.total(), 7, 0.2f);
  std::vector<float> mine(weights.begin(),
                          weights.begin() + static_cast<std::ptrdiff_t>(whole.expert(0)));
  mine.insert(mine.end(), weights.begin() + static_cast<std::ptrdiff_t>(whole.expert(me * El)),
              weights.begin() + static_cast<std::ptrdiff_t>(whole.expert((me + 1) * El)));
  ASSERT_EQ(mine.size(), held.total());
  const std::vector<float> x = normal(static_cast<std::size_t>(N) * C, 100 + me, 1.0f);
  const std::vector<float> dy = normal(x.size(), 200 + me, 1.0f);

  MoeLayer<float> split(MoeExpertShape::gpt2(C), config, nullptr, cpu::ComputeDtype::fp32, &world);
  MoeLayer<float> one(MoeExpertShape::gpt2(C), config);
  MoeActivations<float> a, b;
  std::vector<float> y(x.size()), dx(x.size()), grads(held.total(), 0.0f);
  std::vector<float> y1(x.size()), dx1(x.size()), grads1(whole.total(), 0.0f);
  world.reset_stats();
  split.forward(a, x.data(), N, T, mine.data(), y.data());
  split.backward_input(a, dy.data(), 1.0f, mine.data(), dx.data());
  split.backward_weight(a, grads.data(), 0, N);
  const CommStats stats = world.stats();
  one.forward(b, x.data(), N, T, weights.data(), y1.data());
  one.backward_input(b, dy.data(), 1.0f, weights.data(), dx1.data());
  one.backward_weight(b, grads1.data(), 0, N);

  expect_near_all(y.data(), y1.data(), y.size(), "y");
  expect_near_all(dx.data(), dx1.data(), dx.size(), "dx");
  EXPECT_EQ(a.stats.dropped, b.stats.dropped);
  EXPECT_EQ(a.stats.tokens_per_expert, b.stats.tokens_per_expert);
  expect_near_all(grads.data(), grads1.data(), whole.expert(0), "router gradient");
  // Every rank's tokens reached this rank's experts: the whole layer's gradients summed over ranks.
  world.all_reduce_sum(grads1.data(), grads1.size());
  expect_near_all(grads.data() + held.expert(0), grads1.data() + whole.expert(me * El),
                  held.expert(El) - held.expert(0), "expert gradients");

  // Bytes: per peer, the counts once, then the forward's and the backward's rows both ways.
  std::map<LinkClass, std::uint64_t> expected;
  std::uint64_t rows_out = 0, rows_in = 0;
  for (int p = 0; p < P; ++p) {
    if (p == me) continue;
    const std::uint64_t out = a.exchange.sent_rows[static_cast<std::size_t>(p)];
    const std::uint64_t in = a.exchange.received_rows[static_cast<std::size_t>(p)];
    rows_out += out;
    rows_in += in;
    expected[world.link_to(p)] += El * sizeof(std::int32_t) + 2 * (out + in) * C * sizeof(float);
  }
  EXPECT_EQ(a.stats.exchanged_rows, static_cast<std::int64_t>(rows_out + rows_in));
  EXPECT_EQ(stats.calls.at("all_to_all"), 5u);  // counts; rows, outputs; their gradients
  for (const auto& [link, bytes] : stats.bytes.at("all_to_all"))
    EXPECT_EQ(bytes, expected[link]) << link_class_name(link);
  std::uint64_t total = 0;
  for (const auto& [link, bytes] : expected) total += bytes;
  EXPECT_EQ(stats.total_bytes(), total);
  EXPECT_GT(rows_out, 0u);
}

INSTANTIATE_TEST_SUITE_P(Capacity, MoeExchangeTest, ::testing::Values(1.0, 0.0));

}  // namespace
}  // namespace strata
