// The device arena, the device context and the error checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "model/core/error.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_context.h"

namespace strata::cuda {
namespace {

std::string error_of(void (*body)()) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaArena, AllocatesAlignedAndResetsToMarks) {
  DeviceArena arena(1 << 20);
  void* first = arena.allocate(3);
  void* second = arena.allocate(10, 64);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(second) % 64, 0u);
  EXPECT_EQ(static_cast<char*>(second) - static_cast<char*>(first), 64);
  const std::size_t mark = arena.mark();
  float* third = arena.allocate<float>(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(third) % 256, 0u);
  const std::size_t peak = arena.used();
  arena.reset(mark);
  EXPECT_EQ(arena.used(), mark);
  EXPECT_EQ(arena.peak(), peak);
  EXPECT_EQ(arena.allocate<float>(1000), third);  // the same memory is handed out again
  {
    ArenaScope scope(arena);
    arena.allocate(5000);
  }
  EXPECT_EQ(arena.used(), peak);
  arena.reset();
  arena.reset_peak();
  EXPECT_EQ(arena.peak(), 0u);
}

TEST(CudaArena, FullArenaIsAnErrorNamingTheSizes) {
  DeviceArena arena(4096);
  arena.allocate(4000);
  try {
    arena.allocate(200);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device arena full: 200 bytes requested"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaArena, MovesOwnership) {
  DeviceArena a(1 << 16);
  void* p = a.allocate(100);
  DeviceArena b(std::move(a));
  EXPECT_EQ(b.capacity(), std::size_t{1} << 16);
  EXPECT_EQ(a.capacity(), 0u);  // the moved-from arena owns nothing
  EXPECT_NE(b.allocate(100), p);
}

TEST(CudaDeviceContext, CreatesStreamsHandleAndWorkspace) {
  DeviceContext ctx;
  EXPECT_NE(ctx.stream(), nullptr);
  EXPECT_NE(ctx.copy_stream(), ctx.stream());
  EXPECT_NE(ctx.blaslt(), nullptr);
  EXPECT_NE(ctx.workspace(), nullptr);
  EXPECT_EQ(ctx.workspace_bytes(), DeviceContext::kDefaultWorkspaceBytes);
  EXPECT_FALSE(ctx.allow_tf32());
  ctx.synchronize();
}

TEST(CudaCheck, FailingCallThrowsWithNameFileAndLine) {
  const std::string cuda_message = error_of([] { STRATA_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(cuda_message.find("cudaErrorInvalidValue"), std::string::npos) << cuda_message;
  EXPECT_NE(cuda_message.find("arena_test.cu:"), std::string::npos) << cuda_message;
  const std::string blas_message =
      error_of([] { STRATA_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); });
  EXPECT_NE(blas_message.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << blas_message;
}

}  // namespace
}  // namespace strata::cuda
