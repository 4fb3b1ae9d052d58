// Building blocks of the flash-attention kernels (include from .cu files only): the qkv row's
// columns, tile sizes and shared-memory layouts, cooperative copies between global rows and shared
// tiles, and the small GEMMs on shared tiles, on tensor cores (WMMA) for bf16/fp16 and with FMA for
// fp32.
//
// Every function here is called by all kThreads threads of the block, between barriers placed by
// the caller: a tile is written by some threads and read by others.
#pragma once

#include <mma.h>

#include <cstddef>
#include <type_traits>

#include "model/kernels/attention_pair.h"
#include "model/kernels/cuda/dtype.cuh"

namespace strata::cuda::flash {

inline constexpr int kThreads = 256;  // 8 warps
inline constexpr int kWarps = kThreads / 32;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
// Shared memory an sm_90 block may opt into (227 KiB; CUDA programming guide, compute capability
// 9.0 table).
inline constexpr std::size_t kMaxSharedBytes = 232448;

constexpr std::size_t align128(std::size_t bytes) { return (bytes + 127) / 128 * 128; }

// Head sizes with a kernel: the multiples of 16 (one WMMA k-step) up to 128, whose fp32 backward
// tiles still fit the shared memory of one block (BackwardLayout's static_assert).
inline constexpr int kHeadSizeStep = 16;
inline constexpr int kMaxHeadSize = 128;
constexpr bool head_size_has_kernel(int hs) {
  return hs >= kHeadSizeStep && hs <= kMaxHeadSize && hs % kHeadSizeStep == 0;
}

// The rows one call reads and writes, for head size D: a chunk pair (model/kernels/
// attention_pair.h) of B sequences' Tq query rows against their Tk key rows, query t seeing key s
// iff s ≤ t + offset (offset ≥ 0, so every row sees key 0). The packed qkv of attention.h is the
// pair of each sequence with itself (packed_attention_pair): there every formula below reduces to
// the causal diagonal of one (T, T) attention. Positions are relative to the call's base pointers
// q, k, v (head 0's column), out, lse, delta and the gradients, which take q's (dq), kv's (dk, dv)
// and out's (dout) strides.
template <int D>
struct PairRows {
  int Tq, Tk, offset;
  int group;  // query heads per key/value head: query head h reads key/value head h / group
  long q_row, q_batch, kv_row, kv_batch, out_row, out_batch, stat_head, stat_batch;

  static PairRows of(const AttentionPair& p) {
    return {p.Tq,        p.Tk,        static_cast<int>(p.causal_offset),
            p.NH / p.KV, p.q_row,     p.q_batch,
            p.kv_row,    p.kv_batch,  p.out_row,
            p.out_batch, p.stat_head, p.stat_batch};
  }
  // Sequence b's query head h (q, dq), key/value head kv (k, v, dk, dv), output head h (out,
  // dout) and statistics of head h (lse, delta), at their row 0.
  __host__ __device__ long q_at(int b, int h) const {
    return b * q_batch + static_cast<long>(h) * D;
  }
  __host__ __device__ long kv_at(int b, int kv) const {
    return b * kv_batch + static_cast<long>(kv) * D;
  }
  __host__ __device__ long out_at(int b, int h) const {
    return b * out_batch + static_cast<long>(h) * D;
  }
  __host__ __device__ long stat_at(int b, int h) const { return b * stat_batch + h * stat_head; }
  // Whether query row t sees key row s (a key inside the pair).
  __host__ __device__ bool sees(int t, int s) const { return s <= t + offset && s < Tk; }
  // Whether every query row from r0 on sees every key of [c0, c0 + keys), all inside the pair: a
  // tile pair with nothing to mask on the keys' side.
  __host__ __device__ bool sees_all(int r0, int c0, int keys) const {
    return c0 + keys - 1 <= r0 + offset && c0 + keys <= Tk;
  }
  // One past the last key any of query rows [r0, r0 + rows) sees.
  __host__ __device__ int key_end(int r0, int rows) const { return min(Tk, r0 + rows + offset); }
  // The first query row that sees key row c.
  __host__ __device__ int first_query(int c) const { return c > offset ? c - offset : 0; }
};

// Calls launch.template operator()<D>() with the compile-time head size D equal to hs, which
// head_size_has_kernel(hs) must accept: one instantiation of each kernel per head size.
template <int D = kHeadSizeStep, class Launch>
void with_head_size(int hs, Launch&& launch) {
  if constexpr (D <= kMaxHeadSize) {
    if (hs == D) return launch.template operator()<D>();
    return with_head_size<D + kHeadSizeStep>(hs, launch);
  }
}

// Query and key tiles have the same number of rows, so the causal diagonal always falls inside
// one square tile and a query tile needs exactly the key tiles up to its own index.
template <class T, int D>
struct Tiles {
  static constexpr bool kTensorCores = !std::is_same_v<T, float>;
  static_assert(D % 16 == 0, "head size must be a multiple of 16");
  // 64 rows for tensor cores: (64 × 64) score tiles are 16 WMMA fragments, 2 per warp. fp32 uses
  // 32 so its FMA path fits four (32 × 128) fp32 tiles in shared memory.
  static constexpr int kRows = kTensorCores ? 64 : 32;
  // Row padding in elements. WMMA needs leading dimensions that are multiples of 16 bytes; an
  // extra 16 bytes per row also staggers rows across banks. The FMA path pads by one element,
  // which makes column walks (K read transposed) conflict-free.
  static constexpr int kPadT = kTensorCores ? 8 : 1;
  static constexpr int kPadF = kTensorCores ? 4 : 1;
  static constexpr int kLdT = D + kPadT;      // q, k, v, dout tiles (kRows × D), dtype T
  static constexpr int kLdS = kRows + kPadF;  // scores (kRows × kRows), fp32
  static constexpr int kLdP = kRows + kPadT;  // probabilities, dS (kRows × kRows), dtype T
  static constexpr int kLdA = D + kPadF;      // accumulators (kRows × D), fp32
  static constexpr std::size_t kTileBytes = align128(sizeof(T) * kRows * kLdT);
  static constexpr std::size_t kScoreBytes = align128(sizeof(float) * kRows * kLdS);
  static constexpr std::size_t kProbBytes = align128(sizeof(T) * kRows * kLdP);
  static constexpr std::size_t kAccBytes = align128(sizeof(float) * kRows * kLdA);
  static constexpr std::size_t kRowBytes = align128(sizeof(float) * kRows);
};

// Byte offsets in dynamic shared memory. Forward: q, k, v tiles, scores, probabilities, the
// output accumulator and a per-row factor.
template <class T, int D>
struct ForwardLayout {
  using Tl = Tiles<T, D>;
  static constexpr std::size_t kQ = 0;
  static constexpr std::size_t kK = kQ + Tl::kTileBytes;
  static constexpr std::size_t kV = kK + Tl::kTileBytes;
  static constexpr std::size_t kS = kV + Tl::kTileBytes;
  static constexpr std::size_t kP = kS + Tl::kScoreBytes;
  static constexpr std::size_t kO = kP + Tl::kProbBytes;
  static constexpr std::size_t kRowFactor = kO + Tl::kAccBytes;
  static constexpr std::size_t kBytes = kRowFactor + Tl::kRowBytes;
  static_assert(kBytes <= kMaxSharedBytes);
};

// Backward (both kernels): k, v, q, dout tiles, scores and dP, probabilities and dS, two
// accumulators (dK and dV, or dQ in the first), per-row logsumexp and delta.
template <class T, int D>
struct BackwardLayout {
  using Tl = Tiles<T, D>;
  static constexpr std::size_t kK = 0;
  static constexpr std::size_t kV = kK + Tl::kTileBytes;
  static constexpr std::size_t kQ = kV + Tl::kTileBytes;
  static constexpr std::size_t kDout = kQ + Tl::kTileBytes;
  static constexpr std::size_t kS = kDout + Tl::kTileBytes;
  static constexpr std::size_t kDp = kS + Tl::kScoreBytes;
  static constexpr std::size_t kP = kDp + Tl::kScoreBytes;
  static constexpr std::size_t kDs = kP + Tl::kProbBytes;
  static constexpr std::size_t kAcc0 = kDs + Tl::kProbBytes;
  static constexpr std::size_t kAcc1 = kAcc0 + Tl::kAccBytes;
  static constexpr std::size_t kLse = kAcc1 + Tl::kAccBytes;
  static constexpr std::size_t kDelta = kLse + Tl::kRowBytes;
  static constexpr std::size_t kBytes = kDelta + Tl::kRowBytes;
  static_assert(kBytes <= kMaxSharedBytes);
};

template <class P>
__device__ __forceinline__ P* at(unsigned char* shared, std::size_t offset) {
  return reinterpret_cast<P*>(shared + offset);
}

// tile[r][0..D) = src[(row0 + r)·row_stride + 0..D) for r < kRows; rows at or past `limit` are 0.
// src and row_stride·sizeof(T) must be 16-byte aligned (16-byte loads).
template <class T, int D, int kRows, int kLd>
__device__ void load_rows(T* tile, const T* src, long row_stride, int row0, int limit) {
  constexpr int kN = kVec16<T>;
  constexpr int kChunks = D / kN;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, chunk = idx % kChunks;
    Vec<T, kN> v;
    if (row0 + r < limit) {
      v = load_vec<kN>(src + static_cast<long>(row0 + r) * row_stride + chunk * kN);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k) v.v[k] = from_float<T>(0.0f);
    }
    T* dst = tile + r * kLd + chunk * kN;
    if constexpr ((kLd * sizeof(T)) % 16 == 0) {
      store_vec(dst, v);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k) dst[k] = v.v[k];
    }
  }
}

// dst[(row0 + r)·row_stride + d] = acc[r][d] · scale · row_factor[r] (row_factor may be null) for
// rows below `limit`, rounded to T; `accumulate`: added to what dst holds, in fp32, rounded once.
template <class T, int D, int kRows, int kLd>
__device__ void store_rows(T* dst, long row_stride, int row0, int limit, const float* acc,
                           float scale, const float* row_factor, bool accumulate = false) {
  constexpr int kN = kVec16<T>;
  constexpr int kChunks = D / kN;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, chunk = idx % kChunks;
    if (row0 + r >= limit) continue;
    const float f = row_factor != nullptr ? scale * row_factor[r] : scale;
    T* at_row = dst + static_cast<long>(row0 + r) * row_stride + chunk * kN;
    Vec<T, kN> v;
    if (accumulate) v = load_vec<kN>(at_row);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float value = acc[r * kLd + chunk * kN + k] * f;
      v.v[k] = from_float<T>(accumulate ? to_float(v.v[k]) + value : value);
    }
    store_vec(at_row, v);
  }
}

__device__ __forceinline__ void fill_zero(float* p, int count) {
  for (int i = threadIdx.x; i < count; i += kThreads) p[i] = 0.0f;
}

// c (M × N, fp32, row-major, ldc) = or += A (M × K) · B (K × N) on shared tiles, where
//   A(i, k) = kTransA ? a[k·lda + i] : a[i·lda + k]
//   B(k, j) = kTransB ? b[j·ldb + k] : b[k·ldb + j]
// bf16/fp16: warps take 16 × 16 output fragments in turn, WMMA over k in steps of 16 (col_major
// fragments read the transposed operands in place). fp32: threads take output elements in turn.
template <int M, int N, int K, bool kTransA, bool kTransB, bool kAccumulate, class T>
__device__ void tile_gemm(float* c, int ldc, const T* a, int lda, const T* b, int ldb) {
  if constexpr (std::is_same_v<T, float>) {
    for (int idx = threadIdx.x; idx < M * N; idx += kThreads) {
      const int i = idx / N, j = idx % N;
      float sum = kAccumulate ? c[i * ldc + j] : 0.0f;
#pragma unroll 8
      for (int k = 0; k < K; ++k) {
        const float x = kTransA ? a[k * lda + i] : a[i * lda + k];
        const float y = kTransB ? b[j * ldb + k] : b[k * ldb + j];
        sum = fmaf(x, y, sum);
      }
      c[i * ldc + j] = sum;
    }
  } else {
    namespace wmma = nvcuda::wmma;
    static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0);
    using LayoutA = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;
    constexpr int kColumnFragments = N / 16;
    constexpr int kFragments = (M / 16) * kColumnFragments;
    for (int f = threadIdx.x / 32; f < kFragments; f += kWarps) {
      const int i0 = f / kColumnFragments * 16, j0 = f % kColumnFragments * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      if constexpr (kAccumulate)
        wmma::load_matrix_sync(acc, c + i0 * ldc + j0, ldc, wmma::mem_row_major);
      else
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
        wmma::load_matrix_sync(fa, kTransA ? a + k0 * lda + i0 : a + i0 * lda + k0, lda);
        wmma::load_matrix_sync(fb, kTransB ? b + j0 * ldb + k0 : b + k0 * ldb + j0, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(c + i0 * ldc + j0, acc, ldc, wmma::mem_row_major);
    }
  }
}

}  // namespace strata::cuda::flash
