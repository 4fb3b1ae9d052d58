// Flash-attention backward on shared-memory tiles (attention_kernels.h; FlashAttention-2 algorithm,
// made deterministic by splitting it):
//   delta_i = Σ_d dout[i, d]·out[i, d]                         (one warp per row)
//   P = exp(S·scale − lse),  dP = dout·Vᵀ,  dS = P ⊙ (dP − delta)
//   dV = Σ_h Pᵀ·dout,  dK = scale·Σ_h dSᵀ·Q    (kernel 1: one block per key tile of a key/value
//                                              head, h over the query heads of its group)
//   dQ = scale·dS·K                            (kernel 2: one block per query tile of a query head)
// (delta comes from attention.cu). Masked: pairs of a query and a key it does not see
// (PairRows::sees), and rows past the pair's Tq.
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
// [r0, r0 + kRows); rows past Tq get 0 (they are masked anyway).
template <int kRows>
__device__ void load_row_stats(float* lse_rows, float* delta_rows, const float* lse,
                               const float* delta, int r0, int Tq) {
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const bool real = r0 + r < Tq;
    lse_rows[r] = real ? lse[r0 + r] * kLog2e : 0.0f;
    delta_rows[r] = real ? delta[r0 + r] : 0.0f;
  }
}

// P and dS of the (query tile r0, key tile c0) pair from S and dP; masked entries are 0.
template <class T, int D, int kRows, int kLdS, int kLdP, bool kStoreP>
__device__ void probabilities_and_ds(T* p, T* ds, const float* s, const float* dp,
                                     const float* lse_rows, const float* delta_rows, int r0, int c0,
                                     const PairRows<D>& rows, float scale_log2) {
  for (int idx = threadIdx.x; idx < kRows * kRows; idx += kThreads) {
    const int r = idx / kRows, j = idx % kRows;
    const int i = r0 + r, col = c0 + j;
    const bool keep = i < rows.Tq && rows.sees(i, col);
    const float prob = keep ? exp2f(s[r * kLdS + j] * scale_log2 - lse_rows[r]) : 0.0f;
    if constexpr (kStoreP) p[r * kLdP + j] = from_float<T>(prob);
    ds[r * kLdP + j] = from_float<T>(prob * (dp[r * kLdS + j] - delta_rows[r]));
  }
}

// Kernel 1: block (key tile, key/value head, batch) accumulates dK and dV over the query heads of
// its group and, for each, the query tiles from the first query that sees its first key (earlier
// queries cannot see these keys). Key tile 0 has the most work and starts first.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(BackwardTensors<T> t, PairRows<D> rows, float scale, float scale_log2) {
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
  const int kv = blockIdx.y, b = blockIdx.z;
  load_rows<T, D, kRows, Tl::kLdT>(k, t.k + rows.kv_at(b, kv), rows.kv_row, c0, rows.Tk);
  load_rows<T, D, kRows, Tl::kLdT>(v, t.v + rows.kv_at(b, kv), rows.kv_row, c0, rows.Tk);
  fill_zero(dk, kRows * Tl::kLdA);
  fill_zero(dv, kRows * Tl::kLdA);

  for (int h = kv * rows.group; h < (kv + 1) * rows.group; ++h) {
    const T* q_src = t.q + rows.q_at(b, h);
    const T* dy_src = t.dout + rows.out_at(b, h);
    const long stats = rows.stat_at(b, h);
    for (int r0 = rows.first_query(c0); r0 < rows.Tq; r0 += kRows) {
      __syncthreads();  // the previous tile's products are done with q, dy, p, ds
      load_rows<T, D, kRows, Tl::kLdT>(q, q_src, rows.q_row, r0, rows.Tq);
      load_rows<T, D, kRows, Tl::kLdT>(dy, dy_src, rows.out_row, r0, rows.Tq);
      load_row_stats<kRows>(lse_rows, delta_rows, t.lse + stats, t.delta + stats, r0, rows.Tq);
      __syncthreads();
      tile_gemm<kRows, kRows, D, false, true, false>(s, Tl::kLdS, q, Tl::kLdT, k, Tl::kLdT);
      tile_gemm<kRows, kRows, D, false, true, false>(dp, Tl::kLdS, dy, Tl::kLdT, v, Tl::kLdT);
      __syncthreads();
      probabilities_and_ds<T, D, kRows, Tl::kLdS, Tl::kLdP, true>(
          p, ds, s, dp, lse_rows, delta_rows, r0, c0, rows, scale_log2);
      __syncthreads();
      tile_gemm<kRows, D, kRows, true, false, true>(dv, Tl::kLdA, p, Tl::kLdP, dy, Tl::kLdT);
      tile_gemm<kRows, D, kRows, true, false, true>(dk, Tl::kLdA, ds, Tl::kLdP, q, Tl::kLdT);
    }
  }
  __syncthreads();
  store_rows<T, D, kRows, Tl::kLdA>(t.dk + rows.kv_at(b, kv), rows.kv_row, c0, rows.Tk, dk, scale,
                                    nullptr, t.accumulate);
  store_rows<T, D, kRows, Tl::kLdA>(t.dv + rows.kv_at(b, kv), rows.kv_row, c0, rows.Tk, dv, 1.0f,
                                    nullptr, t.accumulate);
}

// Kernel 2: block (query tile, query head, batch) accumulates dQ over the key tiles of its
// key/value head up to the last key its rows see. The last query tile has the most work and
// starts first.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(BackwardTensors<T> t, PairRows<D> rows, float scale, float scale_log2) {
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
  const int h = blockIdx.y, b = blockIdx.z;
  const T* k_src = t.k + rows.kv_at(b, h / rows.group);
  const T* v_src = t.v + rows.kv_at(b, h / rows.group);
  const long stats = rows.stat_at(b, h);
  load_rows<T, D, kRows, Tl::kLdT>(q, t.q + rows.q_at(b, h), rows.q_row, r0, rows.Tq);
  load_rows<T, D, kRows, Tl::kLdT>(dy, t.dout + rows.out_at(b, h), rows.out_row, r0, rows.Tq);
  load_row_stats<kRows>(lse_rows, delta_rows, t.lse + stats, t.delta + stats, r0, rows.Tq);
  fill_zero(dq, kRows * Tl::kLdA);

  const int key_end = rows.key_end(r0, kRows);
  for (int c0 = 0; c0 < key_end; c0 += kRows) {
    __syncthreads();  // the previous dS·K is done with k and ds
    load_rows<T, D, kRows, Tl::kLdT>(k, k_src, rows.kv_row, c0, rows.Tk);
    load_rows<T, D, kRows, Tl::kLdT>(v, v_src, rows.kv_row, c0, rows.Tk);
    __syncthreads();
    tile_gemm<kRows, kRows, D, false, true, false>(s, Tl::kLdS, q, Tl::kLdT, k, Tl::kLdT);
    tile_gemm<kRows, kRows, D, false, true, false>(dp, Tl::kLdS, dy, Tl::kLdT, v, Tl::kLdT);
    __syncthreads();
    probabilities_and_ds<T, D, kRows, Tl::kLdS, Tl::kLdP, false>(
        nullptr, ds, s, dp, lse_rows, delta_rows, r0, c0, rows, scale_log2);
    __syncthreads();
    tile_gemm<kRows, D, kRows, false, false, true>(dq, Tl::kLdA, ds, Tl::kLdP, k, Tl::kLdT);
  }
  __syncthreads();
  store_rows<T, D, kRows, Tl::kLdA>(t.dq + rows.q_at(b, h), rows.q_row, r0, rows.Tq, dq, scale,
                                    nullptr, t.accumulate);
}

template <class T, int D>
void launch_backward(const BackwardTensors<T>& tensors, const AttentionPair& pair,
                     cudaStream_t stream) {
  constexpr std::size_t kBytes = BackwardLayout<T, D>::kBytes;
  constexpr int kRows = Tiles<T, D>::kRows;
  const PairRows<D> rows = PairRows<D>::of(pair);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float scale_log2 = scale * kLog2e;
  auto* dkdv = attention_dkdv_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 key_grid(static_cast<unsigned>((pair.Tk + kRows - 1) / kRows),
                      static_cast<unsigned>(pair.KV), static_cast<unsigned>(pair.B));
  dkdv<<<key_grid, kThreads, kBytes, stream>>>(tensors, rows, scale, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
  auto* dq = attention_dq_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 query_grid(static_cast<unsigned>((pair.Tq + kRows - 1) / kRows),
                        static_cast<unsigned>(pair.NH), static_cast<unsigned>(pair.B));
  dq<<<query_grid, kThreads, kBytes, stream>>>(tensors, rows, scale, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void backward_tiles(const BackwardTensors<T>& tensors, const AttentionPair& pair,
                    cudaStream_t stream) {
  with_head_size(pair.hs, [&]<int D>() { launch_backward<T, D>(tensors, pair, stream); });
}

template void backward_tiles<float>(const BackwardTensors<float>&, const AttentionPair&,
                                    cudaStream_t);
template void backward_tiles<__nv_bfloat16>(const BackwardTensors<__nv_bfloat16>&,
                                            const AttentionPair&, cudaStream_t);
template void backward_tiles<__half>(const BackwardTensors<__half>&, const AttentionPair&,
                                     cudaStream_t);

}  // namespace strata::cuda::flash
