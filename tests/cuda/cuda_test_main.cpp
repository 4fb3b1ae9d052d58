// main() of the CUDA test executables. Without a usable CUDA device (no GPU, no driver, or a
// failing runtime) the binary prints "skipped: no CUDA device" and exits with 77, which CTest's
// SKIP_RETURN_CODE turns into "skipped": these tests are never reported as passed without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
