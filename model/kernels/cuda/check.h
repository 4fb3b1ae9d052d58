// Error checks for CUDA runtime and cuBLASLt calls: a failing call throws strata::Error naming the
// call, the file and line, and the library's error name and text. Every CUDA/cuBLASLt call in the
// backend goes through one of these; kernel launches are followed by STRATA_CUDA_CHECK_LAUNCH().
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "model/core/error.h"

namespace strata::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

// For destructors, which must not throw: prints the same message to stderr instead.
void report_cuda_error(cudaError_t status, const char* call, const char* file, int line);

}  // namespace strata::cuda

#define STRATA_CUDA_CHECK(call)                                                         \
  do {                                                                                  \
    const cudaError_t strata_cuda_status_ = (call);                                     \
    if (strata_cuda_status_ != cudaSuccess)                                             \
      ::strata::cuda::throw_cuda_error(strata_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define STRATA_CUBLAS_CHECK(call)                                                           \
  do {                                                                                      \
    const cublasStatus_t strata_cublas_status_ = (call);                                    \
    if (strata_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::strata::cuda::throw_cublas_error(strata_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports bad launch configurations (too much shared memory, grid too
// large) at the launch site instead of at the next unrelated call.
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_CHECK(cudaGetLastError())

// In destructors: report, never throw.
#define STRATA_CUDA_REPORT(call)                                                         \
  do {                                                                                   \
    const cudaError_t strata_cuda_status_ = (call);                                      \
    if (strata_cuda_status_ != cudaSuccess)                                              \
      ::strata::cuda::report_cuda_error(strata_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)
