// What every CUDA op needs besides its tensors, passed explicitly (no globals): the device, the
// compute stream all kernels of a step are queued on, a second stream for copies and communication
// that overlap compute, the cuBLASLt handle with its workspace, and the cache of matmul plans.
// One per rank (per device); not thread-safe: the plan cache and descriptor attributes are
// mutated by each GEMM call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "model/kernels/cuda/device_buffer.h"

namespace strata::cuda {

class MatmulPlanCache;

class DeviceContext {
 public:
  // 32 MiB: the cuBLAS documentation's recommended workspace for Hopper GPUs.
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;

  // Makes `device` current for the calling thread and creates the streams, handle and workspace.
  explicit DeviceContext(int device = 0, std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t copy_stream() const { return copy_stream_; }
  cublasLtHandle_t blaslt() const { return blaslt_; }
  void* workspace() const { return workspace_.get(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
  MatmulPlanCache& matmul_plans() { return *matmul_plans_; }

  // fp32 GEMMs on TF32 tensor cores (10-bit mantissa inputs). Off by default: the fp32 path is the
  // one tested against the CPU reference to 1e-5, which TF32 does not meet.
  bool allow_tf32() const { return allow_tf32_; }
  void set_allow_tf32(bool allow) { allow_tf32_ = allow; }

  // Waits for all work queued on both streams.
  void synchronize() const;

 private:
  void release() noexcept;  // destructor, and constructor failure part-way

  int device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cublasLtHandle_t blaslt_ = nullptr;
  DeviceBuffer<std::byte> workspace_;
  bool allow_tf32_ = false;
  std::unique_ptr<MatmulPlanCache> matmul_plans_;
};

}  // namespace strata::cuda
