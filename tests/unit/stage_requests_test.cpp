// The requests between a swarm's stages (train/swarm/stage_requests.h): fp32 arrays travel bit
// for bit; int8 ones within the stated bound of their block's largest value, zeros exactly, in
// the stated number of bytes; a request of the wrong size or an unknown compression is refused.
#include "train/swarm/stage_requests.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace strata::swarm {
namespace {

constexpr std::size_t kBoundary = 700;  // values per sequence: blocks straddle sequences
constexpr int kSeqLen = 5, kBatch = 3;

// Values whose magnitude changes from block to block, with exact zeros among them.
std::vector<float> values(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(kBoundary * kBatch);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = i % 37 == 0 ? 0.0f : normal(rng) * std::ldexp(1.0f, static_cast<int>(i / 256 % 9) - 4);
  return x;
}

TEST(StageRequests, Fp32ArraysTravelBitForBit) {
  const std::vector<float> input = values(1), grad = values(2);
  const StageRequest r = read_stage_request(
      stage_request(kBackward, 1, kBatch, 42, SwarmCompression::none, input, grad), kBoundary,
      kSeqLen);
  EXPECT_EQ(r.method, kBackward);
  EXPECT_EQ(r.stage, 1);
  EXPECT_EQ(r.micro_batch, 42);
  EXPECT_EQ(r.input, input);
  EXPECT_EQ(r.output_grad, grad);
  const RpcMessage reply = stage_reply(grad, SwarmCompression::none, 1.25);
  EXPECT_EQ(reply.payload.size(), grad.size() * 4);
  EXPECT_EQ(reply_floats(reply, grad.size()), grad);
  EXPECT_EQ(reply_loss_sum(reply), 1.25);
}

TEST(StageRequests, Int8ArraysKeepTheirBoundInTheirBytes) {
  const std::vector<float> input = values(3);
  const std::vector<std::int32_t> targets{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const RpcMessage request =
      stage_request(kLoss, 2, kBatch, 7, SwarmCompression::int8, input, {}, targets);
  // n values: n bytes and one fp32 scale per 256, padded to 4.
  const std::size_t n = input.size(), bytes = (n + 4 * ((n + 255) / 256) + 3) / 4 * 4;
  EXPECT_EQ(boundary_bytes(n, SwarmCompression::int8), bytes);
  EXPECT_EQ(request.payload.size(), bytes + targets.size() * 4);
  const StageRequest r = read_stage_request(request, kBoundary, kSeqLen);
  EXPECT_EQ(r.compression, SwarmCompression::int8);
  EXPECT_EQ(r.targets, targets);
  ASSERT_EQ(r.input.size(), n);
  for (std::size_t block = 0; block * kBoundaryBlock < n; ++block) {
    const std::size_t begin = block * kBoundaryBlock, end = std::min(n, begin + kBoundaryBlock);
    float absmax = 0;
    for (std::size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(input[i]));
    const float bound = absmax * (1.0f / 254 + std::ldexp(1.0f, -22));
    for (std::size_t i = begin; i < end; ++i) {
      if (input[i] == 0.0f) {
        EXPECT_EQ(r.input[i], 0.0f) << i;
      }
      EXPECT_LE(std::fabs(r.input[i] - input[i]), bound) << i;
    }
  }
  // The reply is encoded as the request was, and read back by its header.
  const RpcMessage reply = stage_reply(r.input, r.compression, 3.5);
  EXPECT_EQ(reply.payload.size(), bytes);
  const std::vector<float> again = reply_floats(reply, n);
  ASSERT_EQ(again.size(), n);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(again[i], r.input[i], std::fabs(r.input[i]) / 100 + 1e-3f) << i;
}

TEST(StageRequests, AWrongSizeOrAnUnknownCompressionIsRefused) {
  const std::vector<float> input = values(4);
  RpcMessage request = stage_request(kForward, 1, kBatch, 1, SwarmCompression::int8, input);
  EXPECT_THROW(read_stage_request(request, kBoundary + 1, kSeqLen), std::runtime_error);
  request.header += "x";  // q=int8x
  EXPECT_THROW(read_stage_request(request, kBoundary, kSeqLen), std::runtime_error);
  EXPECT_THROW(reply_floats(stage_reply(input, SwarmCompression::none), input.size() - 1),
               std::runtime_error);
}

}  // namespace
}  // namespace strata::swarm
