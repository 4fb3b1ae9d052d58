// Flash-attention forward on shared-memory tiles (attention_kernels.h): one block per (query tile,
// query head, batch), reading its group's key/value head; key tiles stream through shared memory up
// to the diagonal, with an online softmax per query row (FlashAttention-2):
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
    attention_forward_kernel(T* out, float* lse, const T* qkv, int T_, QkvColumns<D> columns,
                             float scale_log2) {
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
  const int h = blockIdx.y, b = blockIdx.z, NH = gridDim.y;
  const int C = columns.C;
  const long qkv_stride = columns.stride();
  const HeadSources<T> src = columns.sources(qkv, b, T_, h);
  load_rows<T, D, kRows, Tl::kLdT>(q, src.q, qkv_stride, r0, T_);
  fill_zero(o, kRows * Tl::kLdA);

  const int row = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int i = r0 + row;  // this thread's query position (past T_ for padding rows)
  float m = -INFINITY, l = 0.0f;
  const int key_end = min(r0 + kRows, T_);
  for (int c0 = 0; c0 < key_end; c0 += kRows) {
    __syncthreads();  // the previous P·V is done with k, v, p
    load_rows<T, D, kRows, Tl::kLdT>(k, src.k, qkv_stride, c0, T_);
    load_rows<T, D, kRows, Tl::kLdT>(v, src.v, qkv_stride, c0, T_);
    __syncthreads();
    tile_gemm<kRows, kRows, D, false, true, false>(s, Tl::kLdS, q, Tl::kLdT, k, Tl::kLdT);
    __syncthreads();

    // Online softmax of row `row` over this key tile; masked: keys after the query, keys past T_.
    float tile_max = -INFINITY;
    for (int j = part; j < kRows; j += kThreadsPerRow) {
      const int col = c0 + j;
      if (col <= i && col < T_) tile_max = fmaxf(tile_max, s[row * Tl::kLdS + j] * scale_log2);
    }
    tile_max = group_max<kThreadsPerRow>(tile_max);
    const float m_new = fmaxf(m, tile_max);
    // Guards for a row with nothing unmasked yet (m_new = −inf): exp2(−inf − −inf) would be NaN.
    const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
    float sum = 0.0f;
    for (int j = part; j < kRows; j += kThreadsPerRow) {
      const int col = c0 + j;
      const bool keep = col <= i && col < T_ && m_new != -INFINITY;
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
    if (i < T_) lse[(static_cast<long>(b) * NH + h) * T_ + i] = (m + log2f(l)) * kLn2;
  }
  __syncthreads();
  store_rows<T, D, kRows, Tl::kLdA>(out + static_cast<long>(b) * T_ * C + static_cast<long>(h) * D,
                                    C, r0, T_, o, 1.0f, row_factor);
}

template <class T, int D>
void launch_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                    cudaStream_t stream) {
  constexpr std::size_t kBytes = ForwardLayout<T, D>::kBytes;
  constexpr int kRows = Tiles<T, D>::kRows;
  auto* kernel = attention_forward_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 grid(static_cast<unsigned>((T_ + kRows - 1) / kRows), static_cast<unsigned>(NH),
                  static_cast<unsigned>(B));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  kernel<<<grid, kThreads, kBytes, stream>>>(out, lse, qkv, T_, QkvColumns<D>{C, KV, NH / KV},
                                             scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void forward_tiles(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                   cudaStream_t stream) {
  with_head_size(C / NH,
                 [&]<int D>() { launch_forward<T, D>(out, lse, qkv, B, T_, C, NH, KV, stream); });
}

template void forward_tiles<float>(float*, float*, const float*, int, int, int, int, int,
                                   cudaStream_t);
template void forward_tiles<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int,
                                           int, int, int, cudaStream_t);
template void forward_tiles<__half>(__half*, float*, const __half*, int, int, int, int, int,
                                    cudaStream_t);

}  // namespace strata::cuda::flash
