// STRATA_HOST_DEVICE marks arithmetic written once for both backends: a __host__ __device__
// function under nvcc, a plain inline function in host C++. The CPU kernels call it, so the CPU
// tests run the very arithmetic the GPU kernels run (docs/ARCHITECTURE.md §2).
#pragma once

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif
