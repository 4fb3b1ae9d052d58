// Flash-attention forward on shared-memory tiles (attention_kernels.h): one block per (query tile,
// query head, batch), reading its group's key/value head; key tiles stream through shared memory up
// to the last key the tile's rows see (the diagonal, for a sequence with itself), with an online
// softmax per query row (FlashAttention-2):
//   m' = max(m, rowmax(S)),  P = exp(S − m'),  l' = l·e^(m−m') + rowsum(P),  O' = O·e^(m−m') + P·V
// and at the end out = O / l, lse = m + log l. Exponentials are base 2 with log2(e) folded into the
// score scale. Query tiles run from the last (most key tiles) to the first so the longest blocks
// start first.
#include "model/kernels/cuda/attention_kernels.h"

#include <cmath>

#include "model/kernels/cuda/attention_tile.cuh"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/reduce.cuh"

namespace strata::cuda::flash {
namespace {

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(ForwardTensors<T> t, PairRows<D> rows, float scale_log2) {
  using Tl = Tiles<T, D>;
  using L = ForwardLayout<T, D>;
  constexpr int kRows = Tl::kRows;
  constexpr int kThreadsPerRow = kThreads / kRows;  // 4 or 8 adjacent lanes share a query row
  extern __shared__ __align__(128) unsigned char shared[];
  T* q = at<T>(shared, L::kQ);
  T* k = at<T>(shared, L::kK);
  T* v = at<T>(shared, L::kV);
  float* s = at<float>(shared, L::kS);
  T* p = at<T>(shared, L::kP);
  float* o = at<float>(shared, L::kO);
  float* row_factor = at<float>(shared, L::kRowFactor);

  const int r0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int h = blockIdx.y, b = blockIdx.z;
  const T* k_src = t.k + rows.kv_at(b, h / rows.group);
  const T* v_src = t.v + rows.kv_at(b, h / rows.group);
  load_rows<T, D, kRows, Tl::kLdT>(q, t.q + rows.q_at(b, h), rows.q_row, r0, rows.Tq);
  fill_zero(o, kRows * Tl::kLdA);

  const int row = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int i = r0 + row;  // this thread's query position (past Tq for padding rows)
  float m = -INFINITY, l = 0.0f;
  const int key_end = rows.key_end(r0, kRows);
  for (int c0 = 0; c0 < key_end; c0 += kRows) {
    __syncthreads();  // the previous P·V is done with k, v, p
    load_rows<T, D, kRows, Tl::kLdT>(k, k_src, rows.kv_row, c0, rows.Tk);
    load_rows<T, D, kRows, Tl::kLdT>(v, v_src, rows.kv_row, c0, rows.Tk);
    __syncthreads();
    tile_gemm<kRows, kRows, D, false, true, false>(s, Tl::kLdS, q, Tl::kLdT, k, Tl::kLdT);
    __syncthreads();

    // Online softmax of row `row` over this key tile; masked: keys the query does not see, keys
    // past Tk.
    float tile_max = -INFINITY;
    for (int j = part; j < kRows; j += kThreadsPerRow) {
      const int col = c0 + j;
      if (rows.sees(i, col)) tile_max = fmaxf(tile_max, s[row * Tl::kLdS + j] * scale_log2);
    }
    tile_max = group_max<kThreadsPerRow>(tile_max);
    const float m_new = fmaxf(m, tile_max);
    // Guards for a row with nothing unmasked yet (m_new = −inf): exp2(−inf − −inf) would be NaN.
    const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
    float sum = 0.0f;
    for (int j = part; j < kRows; j += kThreadsPerRow) {
      const int col = c0 + j;
      const bool keep = rows.sees(i, col) && m_new != -INFINITY;
      const float prob = keep ? exp2f(s[row * Tl::kLdS + j] * scale_log2 - m_new) : 0.0f;
      p[row * Tl::kLdP + j] = from_float<T>(prob);
      sum += prob;
    }
    l = l * alpha + group_sum<kThreadsPerRow>(sum);
    m = m_new;
    for (int d = part; d < D; d += kThreadsPerRow) o[row * Tl::kLdA + d] *= alpha;
    __syncthreads();
    tile_gemm<kRows, D, kRows, false, false, true>(o, Tl::kLdA, p, Tl::kLdP, v, Tl::kLdT);
  }

  if (part == 0) {
    row_factor[row] = l > 0.0f ? 1.0f / l : 0.0f;
    if (i < rows.Tq) t.lse[rows.stat_at(b, h) + i] = (m + log2f(l)) * kLn2;
  }
  __syncthreads();
  store_rows<T, D, kRows, Tl::kLdA>(t.out + rows.out_at(b, h), rows.out_row, r0, rows.Tq, o, 1.0f,
                                    row_factor);
}

template <class T, int D>
void launch_forward(const ForwardTensors<T>& tensors, const AttentionPair& pair,
                    cudaStream_t stream) {
  constexpr std::size_t kBytes = ForwardLayout<T, D>::kBytes;
  constexpr int kRows = Tiles<T, D>::kRows;
  auto* kernel = attention_forward_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 grid(static_cast<unsigned>((pair.Tq + kRows - 1) / kRows),
                  static_cast<unsigned>(pair.NH), static_cast<unsigned>(pair.B));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  kernel<<<grid, kThreads, kBytes, stream>>>(tensors, PairRows<D>::of(pair), scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void forward_tiles(const ForwardTensors<T>& tensors, const AttentionPair& pair,
                   cudaStream_t stream) {
  with_head_size(pair.hs, [&]<int D>() { launch_forward<T, D>(tensors, pair, stream); });
}

template void forward_tiles<float>(const ForwardTensors<float>&, const AttentionPair&,
                                   cudaStream_t);
template void forward_tiles<__nv_bfloat16>(const ForwardTensors<__nv_bfloat16>&,
                                           const AttentionPair&, cudaStream_t);
template void forward_tiles<__half>(const ForwardTensors<__half>&, const AttentionPair&,
                                    cudaStream_t);

}  // namespace strata::cuda::flash
