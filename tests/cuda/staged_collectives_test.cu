// The host-staged collectives (model/kernels/cuda/staged_collectives.h) against the host group
// they stage through: ranks are threads (tests/support/thread_group.h), each with its own stream on
// the one GPU, on fresh random arrays of several sizes. fp32 results are the host collective's
// exactly (the staging only copies); bf16/fp16 results are the fp32 sum of the dtype's values,
// rounded once (within the dtype's tolerance of the fp32 sum); a group of one only copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/host_staging.h"
#include "model/kernels/cuda/staged_collectives.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/support/thread_group.h"

namespace strata::cuda {
namespace {

using namespace testing;
using strata::testing::ThreadGroup;
using strata::testing::ThreadRank;

constexpr std::size_t kMaxElements = 3 * 1000;

// Each rank's input: fresh random values, rounded to T (so the host sum sees what the device has).
std::vector<std::vector<float>> random_inputs(int ranks, std::size_t count, std::mt19937_64& rng) {
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(random_floats(count, rng));
  return inputs;
}

// Runs body(rank, collectives, stream) on every rank of a group of `ranks` threads.
template <class Body>
void on_ranks(int ranks, const Body& body) {
  ThreadGroup group(ranks);
  group.run([&](int r) {
    ThreadRank comm(group, r);
    StagedCollectives staged(comm, kMaxElements);
    cudaStream_t stream = nullptr;
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    body(r, staged, stream);
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    STRATA_CUDA_CHECK(cudaStreamDestroy(stream));
  });
}

template <class T>
class StagedCollectivesTest : public ::testing::Test {};
TYPED_TEST_SUITE(StagedCollectivesTest, ComputeDtypes);

TYPED_TEST(StagedCollectivesTest, AllReduceGatherAndReduceScatterMatchTheHostGroup) {
  using T = TypeParam;
  std::mt19937_64 rng = test_rng();
  for (int ranks : {1, 2, 3}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + ", count " + std::to_string(count));
      auto inputs = random_inputs(ranks, ranks * count, rng);
      for (auto& x : inputs) x = to_floats(to_dtype<T>(x));  // exact in T
      std::vector<float> sum(ranks * count, 0.0f);
      for (const auto& x : inputs)
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
      std::vector<std::vector<float>> reduced(ranks), gathered(ranks), scattered(ranks);
      on_ranks(ranks, [&](int r, StagedCollectives& staged, cudaStream_t stream) {
        DeviceBuffer<T> all(to_dtype<T>(inputs[r]));
        staged.all_reduce_sum(all.get(), ranks * count, stream);
        DeviceBuffer<T> chunk(count);
        DeviceBuffer<T> scatter_in(to_dtype<T>(inputs[r]));
        staged.reduce_scatter_sum(scatter_in.get(), chunk.get(), count, stream);
        // In place: this rank's chunk already sits in its slot of the output.
        std::vector<float> mine(inputs[r].begin(), inputs[r].begin() + count);
        std::vector<float> slots(ranks * count, 0.0f);
        std::copy(mine.begin(), mine.end(), slots.begin() + r * count);
        DeviceBuffer<T> gather(to_dtype<T>(slots));
        staged.all_gather(gather.get() + r * count, gather.get(), count, stream);
        STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
        reduced[r] = to_floats(all.download());
        scattered[r] = to_floats(chunk.download());
        gathered[r] = to_floats(gather.download());
      });
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> expected_gather;
        for (int q = 0; q < ranks; ++q)
          expected_gather.insert(expected_gather.end(), inputs[q].begin(),
                                 inputs[q].begin() + count);
        EXPECT_EQ(gathered[r], expected_gather) << "all_gather on rank " << r;
        const std::vector<float> chunk_sum(sum.begin() + r * count, sum.begin() + (r + 1) * count);
        if constexpr (std::is_same_v<T, float>) {
          EXPECT_EQ(reduced[r], sum) << "all_reduce_sum on rank " << r;
          EXPECT_EQ(scattered[r], chunk_sum) << "reduce_scatter_sum on rank " << r;
        } else {
          EXPECT_LT(relative_error(reduced[r], sum), tolerance<T>()) << "all_reduce_sum";
          EXPECT_LT(relative_error(scattered[r], chunk_sum), tolerance<T>())
              << "reduce_scatter_sum";
          EXPECT_EQ(reduced[r], reduced[0]) << "ranks disagree";
        }
      }
    }
  }
}

TEST(StagedCollectives, AllReduceMaxMatchesTheHostMaximum) {
  std::mt19937_64 rng = test_rng();
  for (int ranks : {1, 2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const std::size_t count = 333;
    const auto inputs = random_inputs(ranks, count, rng);
    std::vector<float> expected = inputs[0];
    for (const auto& x : inputs)
      for (std::size_t i = 0; i < count; ++i) expected[i] = std::max(expected[i], x[i]);
    std::vector<std::vector<float>> got(ranks);
    on_ranks(ranks, [&](int r, StagedCollectives& staged, cudaStream_t stream) {
      DeviceBuffer<float> data(inputs[r]);
      staged.all_reduce_max(data.get(), count, stream);
      STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
      got[r] = data.download();
    });
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(got[r], expected) << "rank " << r;
  }
}

TEST(StagedCollectives, ArraysBeyondTheStagingAreAnError) {
  on_ranks(2, [&](int, StagedCollectives& staged, cudaStream_t stream) {
    DeviceBuffer<float> data(std::vector<float>(kMaxElements + 1, 1.0f));
    // Both ranks fail before any communication, so neither waits for the other.
    EXPECT_THROW(staged.all_reduce_sum(data.get(), kMaxElements + 1, stream), Error);
  });
}

// The staging's fp32 buffer is ordered by one stream: a call on a second one is refused.
TEST(HostStaging, ASecondStreamIsAnError) {
  HostStaging staging(16);
  DeviceBuffer<__nv_bfloat16> device(16);
  std::vector<float> host(16);
  cudaStream_t first = nullptr, second = nullptr;
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking));
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
  staging.to_host(host.data(), device.get(), 16, first);
  EXPECT_THROW(staging.to_host(host.data(), device.get(), 16, second), Error);
  EXPECT_THROW(staging.to_device(device.get(), host.data(), 16, second), Error);
  staging.to_device(device.get(), host.data(), 16, first);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(first));
  STRATA_CUDA_CHECK(cudaStreamDestroy(first));
  STRATA_CUDA_CHECK(cudaStreamDestroy(second));
}

}  // namespace
}  // namespace strata::cuda
