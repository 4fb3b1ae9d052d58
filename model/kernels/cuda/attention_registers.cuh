// Shared pieces of the register-resident attention kernels (attention_register_forward.cu,
// attention_register_backward.cu; include from .cu files only): block shape, shared-tile stride
// and the asynchronous row copies that fill the tiles. See attention_kernels.h and mma.cuh.
//
// Status: written 2026-11-26; see attention.h for what has run on a GPU.
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

}  // namespace strata::cuda::flash
