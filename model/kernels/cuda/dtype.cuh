// Device-side helpers shared by the kernels (include from .cu files only): conversion between the
// compute dtypes (float, __nv_bfloat16, __half) and float, in which all arithmetic is done, and
// aligned vectors of elements for 16-byte loads and stores.
//
// Rounding to bf16/fp16 is round-to-nearest-even, the rounding the CPU backend emulates.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace strata::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// N elements loaded or stored as one aligned access: 16 bytes (the widest per-thread access on
// sm_90) when sizeof(T)·N == 16, two such when it is 32.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements of T in 16 bytes: 4 floats, 8 bf16/fp16.
template <class T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

template <int N, class T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <int N, class T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& x) {
  *reinterpret_cast<Vec<T, N>*>(p) = x;
}

// Host and device: whether `p` may be accessed as Vec<T, N> (launchers choose the vector or the
// scalar instantiation of a kernel with it).
__host__ __device__ inline bool is_aligned(const void* p, unsigned long bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Whether rows of C elements may be read kVec16<T> at a time through every non-null pointer (a
// row kernel's vector instantiation, e.g. the norms').
template <class T, class... Pointers>
bool vector_rows(int C, const Pointers*... pointers) {
  return C % kVec16<T> == 0 && ((pointers == nullptr || is_aligned(pointers, 16)) && ...);
}

}  // namespace strata::cuda
