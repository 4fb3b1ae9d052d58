#include "model/kernels/cuda/check.h"

#include <cstdio>

namespace strata::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  fail("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ", call,
       " at ", file, ":", line);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLASLt error ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
       ") in ", call, " at ", file, ":", line);
}

void report_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  std::fprintf(stderr, "CUDA error %s (%s) in %s at %s:%d\n", cudaGetErrorName(status),
               cudaGetErrorString(status), call, file, line);
}

}  // namespace strata::cuda
