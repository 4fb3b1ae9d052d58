#include "model/kernels/cuda/device_context.h"

#include <cstdio>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/matmul_plans.h"

namespace strata::cuda {

DeviceContext::DeviceContext(int device, std::size_t workspace_bytes) : device_(device) {
  try {
    STRATA_CUDA_CHECK(cudaSetDevice(device_));
    // Non-blocking: the legacy default stream would otherwise serialise with both streams.
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    STRATA_CUBLAS_CHECK(cublasLtCreate(&blaslt_));
    workspace_ = DeviceBuffer<std::byte>(workspace_bytes);
    matmul_plans_ = std::make_unique<MatmulPlanCache>();
  } catch (...) {
    release();
    throw;
  }
}

DeviceContext::~DeviceContext() { release(); }

void DeviceContext::release() noexcept {
  matmul_plans_.reset();                   // descriptors first, while the handle still exists
  workspace_ = DeviceBuffer<std::byte>();  // freed before the handle that used it
  if (blaslt_ != nullptr) {
    const cublasStatus_t status = cublasLtDestroy(blaslt_);
    if (status != CUBLAS_STATUS_SUCCESS)
      std::fprintf(stderr, "cuBLASLt error %s in cublasLtDestroy\n", cublasLtGetStatusName(status));
  }
  if (copy_stream_ != nullptr) STRATA_CUDA_REPORT(cudaStreamDestroy(copy_stream_));
  if (stream_ != nullptr) STRATA_CUDA_REPORT(cudaStreamDestroy(stream_));
  blaslt_ = nullptr;
  copy_stream_ = stream_ = nullptr;
}

void DeviceContext::synchronize() const {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
}

}  // namespace strata::cuda
