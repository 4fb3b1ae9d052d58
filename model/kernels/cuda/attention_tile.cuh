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

// Where the heads of head size D lie in a qkv row (attention.h): NH = C / D query heads, then KV
// key heads, then KV value heads, query head h reading key/value head h / group. With KV == NH the
// stride is 3C and key/value head h sits at C + h·D and 2C + h·D, as in plain multi-head attention.
template <class T>
struct HeadSources {
  const T* q;  // row 0 of a query head
  const T* k;  // row 0 of the key head it reads
  const T* v;  // row 0 of the value head it reads
};

template <int D>
struct QkvColumns {
  int C;      // query channels, NH·D
  int KV;     // key/value heads
  int group;  // query heads per key/value head, NH / KV

  __host__ __device__ long stride() const { return C + 2L * KV * D; }
  __host__ __device__ long query(int h) const { return static_cast<long>(h) * D; }
  __host__ __device__ long key(int kv) const { return C + static_cast<long>(kv) * D; }
  __host__ __device__ long value(int kv) const { return C + static_cast<long>(KV + kv) * D; }

  // Sequence b's query head h and its key/value head in qkv (B, T_, stride()).
  template <class T>
  __host__ __device__ HeadSources<T> sources(const T* qkv, int b, int T_, int h) const {
    const T* row0 = qkv + static_cast<long>(b) * T_ * stride();
    return {row0 + query(h), row0 + key(h / group), row0 + value(h / group)};
  }
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
// rows below `limit`, rounded to T.
template <class T, int D, int kRows, int kLd>
__device__ void store_rows(T* dst, long row_stride, int row0, int limit, const float* acc,
                           float scale, const float* row_factor) {
  constexpr int kN = kVec16<T>;
  constexpr int kChunks = D / kN;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, chunk = idx % kChunks;
    if (row0 + r >= limit) continue;
    const float f = row_factor != nullptr ? scale * row_factor[r] : scale;
    Vec<T, kN> v;
#pragma unroll
    for (int k = 0; k < kN; ++k) v.v[k] = from_float<T>(acc[r * kLd + chunk * kN + k] * f);
    store_vec(dst + static_cast<long>(row0 + r) * row_stride + chunk * kN, v);
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
