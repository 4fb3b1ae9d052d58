#include "model/kernels/cuda/swiglu.h"

#include "model/kernels/cuda/elementwise.cuh"
#include "model/kernels/swiglu.h"

namespace strata::cuda {
namespace {

// The pairs in chunks of kN, grid-stride: chunk i is row n = i / chunks, columns [c, c + kN) of
// that row's F, c = (i % chunks)·kN (kN > 1 needs F % kN == 0, so that a chunk never straddles
// two rows). For each, visit(h_at, out_at, g, u): the offsets of g's first element in h (u's is
// h_at + F) and of the chunk's first element in an (N, F) array, and the chunk's gates and ups.
template <int kN, class T, class Visit>
__device__ __forceinline__ void for_each_pair_chunk(const T* h, long N, int F, Visit visit) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  const int chunks = F / kN;
  const long total = N * chunks;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const long n = i / chunks;
    const long c = (i - n * chunks) * kN;
    const long h_at = 2 * n * F + c;
    visit(h_at, n * F + c, load_vec<kN>(h + h_at), load_vec<kN>(h + h_at + F));
  }
}

template <int kN, class T>
__global__ void __launch_bounds__(kMapThreads)
    swiglu_forward_kernel(T* out, const T* h, long N, int F) {
  for_each_pair_chunk<kN>(
      h, N, F, [&](long, long out_at, const Vec<T, kN>& g, const Vec<T, kN>& u) {
        Vec<T, kN> y;
#pragma unroll
        for (int k = 0; k < kN; ++k)
          y.v[k] = from_float<T>(swiglu_element(to_float(g.v[k]), to_float(u.v[k])));
        store_vec(out + out_at, y);
      });
}

// A chunk's loads (g and u among them) all come before its stores, so dh may alias h.
template <int kN, class T>
__global__ void __launch_bounds__(kMapThreads)
    swiglu_backward_kernel(T* dh, const T* dout, const T* h, long N, int F) {
  for_each_pair_chunk<kN>(
      h, N, F, [&](long h_at, long out_at, const Vec<T, kN>& g, const Vec<T, kN>& u) {
        const Vec<T, kN> dy = load_vec<kN>(dout + out_at);
        Vec<T, kN> dg, du;
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          const SwigluGradient<float> d =
              swiglu_element_backward(to_float(g.v[k]), to_float(u.v[k]), to_float(dy.v[k]));
          dg.v[k] = from_float<T>(d.dg);
          du.v[k] = from_float<T>(d.du);
        }
        store_vec(dh + h_at, dg);
        store_vec(dh + h_at + F, du);
      });
}

// Whether the kMapVector-wide kernels apply: rows of whole vectors, every pointer aligned for them
// (with F % kMapVector == 0, every row and both halves of it start aligned too).
template <class T, class... Pointers>
bool vectorised(int F, const Pointers*... pointers) {
  return F % kMapVector == 0 && (is_aligned(pointers, sizeof(Vec<T, kMapVector>)) && ...);
}

}  // namespace

template <class T>
void swiglu_forward(T* out, const T* h, int N, int F, cudaStream_t stream) {
  const long pairs = static_cast<long>(N) * F;
  if (pairs <= 0) return;
  if (vectorised<T>(F, out, h)) {
    swiglu_forward_kernel<kMapVector>
        <<<map_blocks(pairs / kMapVector), kMapThreads, 0, stream>>>(out, h, N, F);
  } else {
    swiglu_forward_kernel<1><<<map_blocks(pairs), kMapThreads, 0, stream>>>(out, h, N, F);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void swiglu_backward(T* dh, const T* dout, const T* h, int N, int F, cudaStream_t stream) {
  const long pairs = static_cast<long>(N) * F;
  if (pairs <= 0) return;
  if (vectorised<T>(F, dh, dout, h)) {
    swiglu_backward_kernel<kMapVector>
        <<<map_blocks(pairs / kMapVector), kMapThreads, 0, stream>>>(dh, dout, h, N, F);
  } else {
    swiglu_backward_kernel<1><<<map_blocks(pairs), kMapThreads, 0, stream>>>(dh, dout, h, N, F);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

#define STRATA_INSTANTIATE(T)                                            \
  template void swiglu_forward<T>(T*, const T*, int, int, cudaStream_t); \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
