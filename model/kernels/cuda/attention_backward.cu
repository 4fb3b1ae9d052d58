// Flash-attention backward on shared-memory tiles (attention_kernels.h; FlashAttention-2 algorithm,
// made deterministic by splitting it):
//   delta_i = Σ_d dout[i, d]·out[i, d]                         (one warp per row)
//   P = exp(S·scale − lse),  dP = dout·Vᵀ,  dS = P ⊙ (dP − delta)
//   dV = Σ_h Pᵀ·dout,  dK = scale·Σ_h dSᵀ·Q    (kernel 1: one block per key tile of a key/value
//                                              head, h over the query heads of its group)
//   dQ = scale·dS·K                            (kernel 2: one block per query tile of a query head)
// Each block owns its output rows and accumulates them in shared memory in a fixed order (query
// heads in turn, query tiles in turn), so no atomics and bitwise-reproducible results; the price
// is computing S and dP twice.
#include <cmath>

#include "model/kernels/cuda/attention_kernels.h"
#include "model/kernels/cuda/attention_tile.cuh"
#include "model/kernels/cuda/check.h"

namespace strata::cuda::flash {
namespace {

// Per-row logsumexp (as base-2, matching the scores' log2(e) scaling) and delta of query rows
// [r0, r0 + kRows); rows past T_ get 0 (they are masked anyway).
template <int kRows>
__device__ void load_row_stats(float* lse_rows, float* delta_rows, const float* lse,
                               const float* delta, int r0, int T_) {
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const bool real = r0 + r < T_;
    lse_rows[r] = real ? lse[r0 + r] * kLog2e : 0.0f;
    delta_rows[r] = real ? delta[r0 + r] : 0.0f;
  }
}

// P and dS of the (query tile r0, key tile c0) pair from S and dP; masked entries are 0.
template <class T, int kRows, int kLdS, int kLdP, bool kStoreP>
__device__ void probabilities_and_ds(T* p, T* ds, const float* s, const float* dp,
                                     const float* lse_rows, const float* delta_rows, int r0, int c0,
                                     int T_, float scale_log2) {
  for (int idx = threadIdx.x; idx < kRows * kRows; idx += kThreads) {
    const int r = idx / kRows, j = idx % kRows;
    const int i = r0 + r, col = c0 + j;
    const bool keep = i < T_ && col <= i;
    const float prob = keep ? exp2f(s[r * kLdS + j] * scale_log2 - lse_rows[r]) : 0.0f;
    if constexpr (kStoreP) p[r * kLdP + j] = from_float<T>(prob);
    ds[r * kLdP + j] = from_float<T>(prob * (dp[r * kLdS + j] - delta_rows[r]));
  }
}

// Kernel 1: block (key tile, key/value head, batch) accumulates dK and dV over the query heads of
// its group and, for each, the query tiles at and after its own (earlier queries cannot see these
// keys). Key tile 0 has the most work and starts first.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                          const float* delta, int T_, QkvColumns<D> columns, float scale,
                          float scale_log2) {
  using Tl = Tiles<T, D>;
  using L = BackwardLayout<T, D>;
  constexpr int kRows = Tl::kRows;
  extern __shared__ __align__(128) unsigned char shared[];
  T* k = at<T>(shared, L::kK);
  T* v = at<T>(shared, L::kV);
  T* q = at<T>(shared, L::kQ);
  T* dy = at<T>(shared, L::kDout);
  float* s = at<float>(shared, L::kS);
  float* dp = at<float>(shared, L::kDp);
  T* p = at<T>(shared, L::kP);
  T* ds = at<T>(shared, L::kDs);
  float* dk = at<float>(shared, L::kAcc0);
  float* dv = at<float>(shared, L::kAcc1);
  float* lse_rows = at<float>(shared, L::kLse);
  float* delta_rows = at<float>(shared, L::kDelta);

  const int c0 = blockIdx.x * kRows;
  const int kv = blockIdx.y, b = blockIdx.z, NH = gridDim.y * columns.group;
  const int C = columns.C;
  const long qkv_stride = columns.stride();
  const T* row0 = qkv + static_cast<long>(b) * T_ * qkv_stride;
  load_rows<T, D, kRows, Tl::kLdT>(k, row0 + columns.key(kv), qkv_stride, c0, T_);
  load_rows<T, D, kRows, Tl::kLdT>(v, row0 + columns.value(kv), qkv_stride, c0, T_);
  fill_zero(dk, kRows * Tl::kLdA);
  fill_zero(dv, kRows * Tl::kLdA);

  for (int h = kv * columns.group; h < (kv + 1) * columns.group; ++h) {
    const T* q_src = row0 + columns.query(h);
    const T* dy_src = dout + static_cast<long>(b) * T_ * C + columns.query(h);
    const long bh = static_cast<long>(b) * NH + h;
    for (int r0 = c0; r0 < T_; r0 += kRows) {
      __syncthreads();  // the previous tile's products are done with q, dy, p, ds
      load_rows<T, D, kRows, Tl::kLdT>(q, q_src, qkv_stride, r0, T_);
      load_rows<T, D, kRows, Tl::kLdT>(dy, dy_src, C, r0, T_);
      load_row_stats<kRows>(lse_rows, delta_rows, lse + bh * T_, delta + bh * T_, r0, T_);
      __syncthreads();
      tile_gemm<kRows, kRows, D, false, true, false>(s, Tl::kLdS, q, Tl::kLdT, k, Tl::kLdT);
      tile_gemm<kRows, kRows, D, false, true, false>(dp, Tl::kLdS, dy, Tl::kLdT, v, Tl::kLdT);
      __syncthreads();
      probabilities_and_ds<T, kRows, Tl::kLdS, Tl::kLdP, true>(p, ds, s, dp, lse_rows, delta_rows,
                                                               r0, c0, T_, scale_log2);
      __syncthreads();
      tile_gemm<kRows, D, kRows, true, false, true>(dv, Tl::kLdA, p, Tl::kLdP, dy, Tl::kLdT);
      tile_gemm<kRows, D, kRows, true, false, true>(dk, Tl::kLdA, ds, Tl::kLdP, q, Tl::kLdT);
    }
  }
  __syncthreads();
  T* dst = dqkv + static_cast<long>(b) * T_ * qkv_stride;
  store_rows<T, D, kRows, Tl::kLdA>(dst + columns.key(kv), qkv_stride, c0, T_, dk, scale, nullptr);
  store_rows<T, D, kRows, Tl::kLdA>(dst + columns.value(kv), qkv_stride, c0, T_, dv, 1.0f, nullptr);
}

// Kernel 2: block (query tile, query head, batch) accumulates dQ over the key tiles of its
// key/value head up to the diagonal. The last query tile has the most work and starts first.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                        int T_, QkvColumns<D> columns, float scale, float scale_log2) {
  using Tl = Tiles<T, D>;
  using L = BackwardLayout<T, D>;
  constexpr int kRows = Tl::kRows;
  extern __shared__ __align__(128) unsigned char shared[];
  T* k = at<T>(shared, L::kK);
  T* v = at<T>(shared, L::kV);
  T* q = at<T>(shared, L::kQ);
  T* dy = at<T>(shared, L::kDout);
  float* s = at<float>(shared, L::kS);
  float* dp = at<float>(shared, L::kDp);
  T* ds = at<T>(shared, L::kDs);
  float* dq = at<float>(shared, L::kAcc0);
  float* lse_rows = at<float>(shared, L::kLse);
  float* delta_rows = at<float>(shared, L::kDelta);

  const int r0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int h = blockIdx.y, b = blockIdx.z, NH = gridDim.y;
  const int C = columns.C;
  const long qkv_stride = columns.stride();
  const long head = columns.query(h);
  const HeadSources<T> src = columns.sources(qkv, b, T_, h);
  const long bh = static_cast<long>(b) * NH + h;
  load_rows<T, D, kRows, Tl::kLdT>(q, src.q, qkv_stride, r0, T_);
  load_rows<T, D, kRows, Tl::kLdT>(dy, dout + static_cast<long>(b) * T_ * C + head, C, r0, T_);
  load_row_stats<kRows>(lse_rows, delta_rows, lse + bh * T_, delta + bh * T_, r0, T_);
  fill_zero(dq, kRows * Tl::kLdA);

  const int key_end = min(r0 + kRows, T_);
  for (int c0 = 0; c0 < key_end; c0 += kRows) {
    __syncthreads();  // the previous dS·K is done with k and ds
    load_rows<T, D, kRows, Tl::kLdT>(k, src.k, qkv_stride, c0, T_);
    load_rows<T, D, kRows, Tl::kLdT>(v, src.v, qkv_stride, c0, T_);
    __syncthreads();
    tile_gemm<kRows, kRows, D, false, true, false>(s, Tl::kLdS, q, Tl::kLdT, k, Tl::kLdT);
    tile_gemm<kRows, kRows, D, false, true, false>(dp, Tl::kLdS, dy, Tl::kLdT, v, Tl::kLdT);
    __syncthreads();
    probabilities_and_ds<T, kRows, Tl::kLdS, Tl::kLdP, false>(nullptr, ds, s, dp, lse_rows,
                                                              delta_rows, r0, c0, T_, scale_log2);
    __syncthreads();
    tile_gemm<kRows, D, kRows, false, false, true>(dq, Tl::kLdA, ds, Tl::kLdP, k, Tl::kLdT);
  }
  __syncthreads();
  store_rows<T, D, kRows, Tl::kLdA>(dqkv + static_cast<long>(b) * T_ * qkv_stride + head,
                                    qkv_stride, r0, T_, dq, scale, nullptr);
}

template <class T, int D>
void launch_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                     int B, int T_, int C, int NH, int KV, cudaStream_t stream) {
  constexpr std::size_t kBytes = BackwardLayout<T, D>::kBytes;
  constexpr int kRows = Tiles<T, D>::kRows;
  const unsigned tiles = static_cast<unsigned>((T_ + kRows - 1) / kRows);
  const QkvColumns<D> columns{C, KV, NH / KV};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float scale_log2 = scale * kLog2e;
  auto* dkdv = attention_dkdv_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 key_grid(tiles, static_cast<unsigned>(KV), static_cast<unsigned>(B));
  dkdv<<<key_grid, kThreads, kBytes, stream>>>(dqkv, dout, qkv, lse, delta, T_, columns, scale,
                                               scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
  auto* dq = attention_dq_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 query_grid(tiles, static_cast<unsigned>(NH), static_cast<unsigned>(B));
  dq<<<query_grid, kThreads, kBytes, stream>>>(dqkv, dout, qkv, lse, delta, T_, columns, scale,
                                               scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void backward_tiles(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                    int B, int T_, int C, int NH, int KV, cudaStream_t stream) {
  with_head_size(C / NH, [&]<int D>() {
    launch_backward<T, D>(dqkv, dout, qkv, lse, delta, B, T_, C, NH, KV, stream);
  });
}

template void backward_tiles<float>(float*, const float*, const float*, const float*, const float*,
                                    int, int, int, int, int, cudaStream_t);
template void backward_tiles<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                            const __nv_bfloat16*, const float*, const float*, int,
                                            int, int, int, int, cudaStream_t);
template void backward_tiles<__half>(__half*, const __half*, const __half*, const float*,
                                     const float*, int, int, int, int, int, cudaStream_t);

}  // namespace strata::cuda::flash
