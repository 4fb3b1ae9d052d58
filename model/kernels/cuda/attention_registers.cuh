// Shared pieces of the register-resident attention kernels (attention_register_forward.cu,
// attention_register_backward.cu; include from .cu files only): block shape, shared-tile stride,
// the asynchronous row copies that fill the tiles, and the two warp-level products every kernel
// is made of (S = Q·Kᵀ-shaped, O += P·V-shaped). See attention_kernels.h and mma.cuh.
#pragma once

#include "model/kernels/cuda/mma.cuh"

namespace strata::cuda::flash {

inline constexpr int kRegisterWarps = 4;
inline constexpr int kRegisterThreads = 32 * kRegisterWarps;
inline constexpr int kWarpRows = 16;                           // rows of one m16n8k16 product
inline constexpr int kBlockRows = kWarpRows * kRegisterWarps;  // queries (or keys) per block
inline constexpr int kKeyTile = 64;                            // keys per streamed tile
// Equal tiles: the causal diagonal falls inside one key tile, and every key of the tiles before it
// precedes every query of the block.
static_assert(kKeyTile == kBlockRows);

// Shared-memory row stride in elements: 16 bytes of padding shift consecutive rows by four banks,
// so the eight row addresses of one ldmatrix matrix hit eight different bank groups.
template <int D>
inline constexpr int kLd = D + 8;

// Copies rows [row0, row0 + kRows) of a (rows × D) strided source into a shared tile
// asynchronously, 16 bytes per copy; rows at or past `limit` are zero-filled (never read), so
// padding keys contribute exact zeros to P·V.
template <class T, int D, int kRows>
__device__ __forceinline__ void copy_rows_async(T* tile, const T* src, long stride, int row0,
                                                int limit) {
  constexpr int kChunks = D * static_cast<int>(sizeof(T)) / 16;
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(T));
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kRegisterThreads) {
    const int r = idx / kChunks, chunk = idx % kChunks;
    const bool valid = row0 + r < limit;
    const T* from = valid ? src + static_cast<long>(row0 + r) * stride + chunk * kPerChunk : src;
    mma::copy_async16(tile + r * kLd<D> + chunk * kPerChunk, from, valid);
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// A warp's 16 rows of one operand as A fragments, one per k-step of 16 columns: either loaded once
// and held in registers for the whole kernel (kHeld, head sizes up to 64), or read from the shared
// tile each time they are needed (larger heads, which must spare the registers).
template <class T, int kSteps, bool kHeld>
class RowFragments {
 public:
  __device__ __forceinline__ RowFragments(const T* tile, int ld, int row0, int lane)
      : tile_(tile), ld_(ld), row0_(row0), lane_(lane) {}

  // Reads the held fragments (kHeld), once the tile has landed.
  __device__ __forceinline__ void hold() {
    if constexpr (kHeld) {
#pragma unroll
      for (int step = 0; step < kSteps; ++step)
        mma::load_a_fragment(held_[step], tile_, ld_, row0_, step * 16, lane_);
    }
  }

  __device__ __forceinline__ void get(unsigned (&a)[4], int step) const {
    if constexpr (kHeld) {
#pragma unroll
      for (int e = 0; e < 4; ++e) a[e] = held_[step][e];
    } else {
      mma::load_a_fragment(a, tile_, ld_, row0_, step * 16, lane_);
    }
  }

 private:
  const T* tile_;
  int ld_, row0_, lane_;
  unsigned held_[kHeld ? kSteps : 1][4];
};

// acc (16 × 8·kGroups) = A · Bᵀ, A the warp's rows in `a` (kSteps k-steps), B's rows the first
// 8·kGroups rows of `b_tile` (a Q·Kᵀ-shaped product: both operands row-major over k).
template <class T, int kSteps, int kGroups, class Fragments>
__device__ __forceinline__ void product_with_rows(float (&acc)[kGroups][4], const Fragments& a,
                                                  const T* b_tile, int ld, int lane) {
  zero(acc);
#pragma unroll
  for (int step = 0; step < kSteps; ++step) {
    unsigned fragment[4];
    a.get(fragment, step);
#pragma unroll
    for (int j = 0; j < kGroups; j += 2) {
      unsigned b[4];
      mma::load_b_fragments_rows_n(b, b_tile, ld, step * 16, j * 8, lane);
      mma::mma_16816<T>(acc[j], fragment, b[0], b[1]);
      mma::mma_16816<T>(acc[j + 1], fragment, b[2], b[3]);
    }
  }
}

// acc (16 × 8·kGroups) += P · B, P (16 × 8·kKeyGroups) held in accumulators and rounded to T,
// B the first 8·kKeyGroups rows of `b_tile` (a P·V-shaped product: B row-major over k).
template <class T, int kKeyGroups, int kGroups>
__device__ __forceinline__ void accumulate_product(float (&acc)[kGroups][4],
                                                   const float (&p)[kKeyGroups][4], const T* b_tile,
                                                   int ld, int lane) {
#pragma unroll
  for (int step = 0; step < kKeyGroups / 2; ++step) {
    unsigned a[4];
    mma::pack_a_fragment<T>(a, p[2 * step], p[2 * step + 1]);
#pragma unroll
    for (int n = 0; n < kGroups; n += 2) {
      unsigned b[4];
      mma::load_b_fragments_rows_k(b, b_tile, ld, step * 16, n * 8, lane);
      mma::mma_16816<T>(acc[n], a, b[0], b[1]);
      mma::mma_16816<T>(acc[n + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace strata::cuda::flash
