// The NCCL communicator (parallel/comm/nccl_communicator.h) over a group of one process, the only
// NCCL group one GPU can hold (NCCL refuses two ranks on one GPU): set-up over MPI, every
// collective in every element type (a sum or gather over one rank is a copy, bit for bit), the
// in-place gather, and the accounting (every call counted on the MPI group, no bytes sent by a lone
// rank). Groups of several ranks need several GPUs and are not tested here.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/nccl_communicator.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata {
namespace {

using namespace cuda::testing;

class NcclAlone : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      MPI_Init(nullptr, nullptr);  // a singleton: no mpirun needed
      initialized_here_ = true;
    }
  }
  static void TearDownTestSuite() {
    if (initialized_here_) MPI_Finalize();
  }
  void SetUp() override {
    STRATA_CUDA_CHECK(cudaSetDevice(0));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    group_ = std::make_unique<MpiCommunicator>(MPI_COMM_SELF, 1);
    nccl_ = std::make_unique<NcclCommunicator>(*group_);
  }
  void TearDown() override {
    nccl_.reset();
    group_.reset();
    STRATA_CUDA_CHECK(cudaStreamDestroy(stream_));
  }
  void wait() { STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  static inline bool initialized_here_ = false;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<MpiCommunicator> group_;
  std::unique_ptr<NcclCommunicator> nccl_;
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void check_copies(NcclCommunicator& nccl, cudaStream_t stream) {
  auto rng = test_rng();
  const std::size_t n = 1001;
  const std::vector<T> x = to_dtype<T>(random_floats(n, rng));
  DeviceBuffer<T> data(x), out(n);
  nccl.all_reduce_sum(data.get(), n, stream);
  nccl.all_gather(data.get(), out.get(), n, stream);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(same_bits(data.download(), x)) << "all_reduce_sum over one rank changed the data";
  EXPECT_TRUE(same_bits(out.download(), x)) << "all_gather over one rank is not a copy";
  DeviceBuffer<T> scattered(n);
  nccl.reduce_scatter_sum(data.get(), scattered.get(), n, stream);
  nccl.all_gather(data.get(), data.get(), n, stream);  // in place: rank 0's chunk is the array
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(same_bits(scattered.download(), x)) << "reduce_scatter_sum over one rank";
  EXPECT_TRUE(same_bits(data.download(), x)) << "in-place all_gather over one rank";
}

TEST_F(NcclAlone, EveryCollectiveIsACopyInEveryElementType) {
  EXPECT_EQ(nccl_->size(), 1);
  EXPECT_EQ(nccl_->rank(), 0);
  check_copies<float>(*nccl_, stream_);
  check_copies<__nv_bfloat16>(*nccl_, stream_);
  check_copies<__half>(*nccl_, stream_);
  auto rng = test_rng();
  const std::vector<float> x = random_floats(77, rng);
  DeviceBuffer<float> maxima(x);
  nccl_->all_reduce_max(maxima.get(), x.size(), stream_);
  wait();
  EXPECT_EQ(maxima.download(), x);
}

TEST_F(NcclAlone, CallsAreCountedOnTheMpiGroup) {
  group_->reset_stats();
  DeviceBuffer<float> data(std::vector<float>(64, 1.0f)), out(64);
  nccl_->all_reduce_sum(data.get(), 64, stream_);
  nccl_->all_reduce_sum(data.get(), 64, stream_);
  nccl_->all_gather(data.get(), out.get(), 64, stream_);
  nccl_->reduce_scatter_sum(data.get(), out.get(), 64, stream_);
  nccl_->all_reduce_sum(data.get(), 0, stream_);   // counted like any call, as MPI's are
  nccl_->all_reduce_max(data.get(), 64, stream_);  // counted as the all_reduce NCCL runs
  wait();
  const CommStats& stats = group_->stats();
  EXPECT_EQ(stats.calls.at("all_reduce"), 4u);
  EXPECT_EQ(stats.calls.at("all_gather"), 1u);
  EXPECT_EQ(stats.calls.at("reduce_scatter"), 1u);
  EXPECT_EQ(stats.total_bytes(), 0u);  // a lone rank sends nothing
}

}  // namespace
}  // namespace strata
