// Flash-attention forward for bf16/fp16 with every score in registers (FlashAttention-2's
// arrangement): one block of 4 warps per (64-query tile, query head, batch), each warp owning 16
// query rows, reading its group's key/value head. Per key tile of 64, each warp computes its 16 ×
// 64 scores S = Q·Kᵀ into mma accumulators, updates the online softmax of its rows there,
//   m' = max(m, rowmax(S)),  P = exp2(S·scale·log2 e − m'),  l' = l·2^(m−m') + rowsum(P),
//   O' = O·2^(m−m') + P·V,
// turns P (rounded to T) into the A operand of P·V without leaving registers (mma.cuh), and at
// the end writes out = O / l and lse = (m + log2 l)·ln 2. The block's Q tile is loaded once and
// kept as fragments; K and V tiles are copied asynchronously into two shared buffers, the next
// tile's copy overlapping this tile's products. Query tiles run from the last (most key tiles) to
// the first, so the longest blocks start first. Only the tiles holding a key that some query of
// the block does not see need the masks (PairRows::sees_all): for a sequence with itself the
// diagonal tile, the last; every earlier key precedes every query of the block. The warp-level
// products are attention_registers.cuh's.
#include <cmath>

#include "model/kernels/cuda/attention_kernels.h"
#include "model/kernels/cuda/attention_registers.cuh"
#include "model/kernels/cuda/attention_tile.cuh"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/mma.cuh"

namespace strata::cuda::flash {
namespace {

using namespace mma;

template <class T, int D>
__global__ void __launch_bounds__(kRegisterThreads)
    forward_registers_kernel(ForwardTensors<T> tensors, PairRows<D> rows, float scale_log2) {
  constexpr int kTile = kBlockRows * kLd<D>;  // elements of one shared tile (Q, K or V)
  constexpr int kSteps = D / 16;              // k-steps of Q·Kᵀ
  constexpr int kKeyGroups = kKeyTile / 8;    // 8-key accumulators of S
  constexpr int kDimGroups = D / 8;           // 8-column accumulators of O
  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* k_tiles = q_tile + kTile;       // two buffers
  T* v_tiles = k_tiles + 2 * kTile;  // two buffers

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int r0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;
  const int h = blockIdx.y, b = blockIdx.z;
  const T* k_src = tensors.k + rows.kv_at(b, h / rows.group);
  const T* v_src = tensors.v + rows.kv_at(b, h / rows.group);
  const long kv_row = rows.kv_row;
  const int Tk = rows.Tk;
  // This thread's two query rows (past Tq for padding rows, whose results are not stored).
  const int row[2] = {r0 + warp * kWarpRows + g, r0 + warp * kWarpRows + g + 8};
  // Key tiles up to the last key the block's rows see (the diagonal, for a sequence with itself).
  const int tiles = (rows.key_end(r0, kBlockRows) + kKeyTile - 1) / kKeyTile;

  copy_rows_async<T, D, kBlockRows>(q_tile, tensors.q + rows.q_at(b, h), rows.q_row, r0, rows.Tq);
  copy_rows_async<T, D, kKeyTile>(k_tiles, k_src, kv_row, 0, Tk);
  copy_rows_async<T, D, kKeyTile>(v_tiles, v_src, kv_row, 0, Tk);
  commit_copies();

  RowFragments<T, kSteps, true> q(q_tile, kLd<D>, warp * kWarpRows, lane);
  float o[kDimGroups][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};  // this thread's partial row sums; the 4 lanes of a row add up at end

  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) {
      const int next = (tile + 1) % 2;
      copy_rows_async<T, D, kKeyTile>(k_tiles + next * kTile, k_src, kv_row, (tile + 1) * kKeyTile,
                                      Tk);
      copy_rows_async<T, D, kKeyTile>(v_tiles + next * kTile, v_src, kv_row, (tile + 1) * kKeyTile,
                                      Tk);
      commit_copies();
      wait_copies<1>();  // this tile's group (and Q's) has landed; the next may be in flight
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    if (tile == 0) q.hold();
    const T* k = k_tiles + (tile % 2) * kTile;
    const T* v = v_tiles + (tile % 2) * kTile;

    float s[kKeyGroups][4];
    product_with_rows<T, kSteps>(s, q, k, kLd<D>, lane);

    // Scale to base 2 and mask (a tile with keys some row does not see: for a sequence with
    // itself the diagonal, the last), then the rows' new maxima.
    const int key0 = tile * kKeyTile;
    const bool masked = !rows.sees_all(r0, key0, kKeyTile);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeyGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + j * 8 + 2 * t + (e & 1);
        const int i = e / 2;
        float x = s[j][e] * scale_log2;
        if (masked && !rows.sees(row[i], key)) x = -INFINITY;
        s[j][e] = x;
        tile_max[i] = fmaxf(tile_max[i], x);
      }
    float alpha[2], m_new[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      m_new[i] = fmaxf(m[i], tile_max[i]);
      // A row with nothing unmasked yet keeps m = −inf: exp2(−inf − −inf) would be NaN.
      alpha[i] = m_new[i] == -INFINITY ? 1.0f : exp2f(m[i] - m_new[i]);
      m[i] = m_new[i];
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kKeyGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const float p = m_new[i] == -INFINITY ? 0.0f : exp2f(s[j][e] - m_new[i]);
        s[j][e] = p;
        sum[i] += p;
      }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + sum[i];
#pragma unroll
    for (int n = 0; n < kDimGroups; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O += P·V, P's accumulators repacked as A fragments (16 keys per k-step).
    accumulate_product<T>(o, s, v, kLd<D>, lane);
    __syncthreads();  // every warp is done with this buffer before the next copy refills it
  }

  T* out_base = tensors.out + rows.out_at(b, h);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float total = l[i];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    if (row[i] >= rows.Tq) continue;
    const float inverse = total > 0.0f ? 1.0f / total : 0.0f;
    T* dst = out_base + static_cast<long>(row[i]) * rows.out_row + 2 * t;
#pragma unroll
    for (int n = 0; n < kDimGroups; ++n) {
      const unsigned pair = pack2<T>(o[n][2 * i] * inverse, o[n][2 * i + 1] * inverse);
      *reinterpret_cast<unsigned*>(dst + n * 8) = pair;
    }
    if (t == 0) tensors.lse[rows.stat_at(b, h) + row[i]] = (m[i] + log2f(total)) * kLn2;
  }
}

template <class T, int D>
void launch_forward(const ForwardTensors<T>& tensors, const AttentionPair& pair,
                    cudaStream_t stream) {
  constexpr std::size_t kBytes = 5 * sizeof(T) * kBlockRows * kLd<D>;  // Q, 2 K, 2 V
  static_assert(kBytes <= kMaxSharedBytes);
  auto* kernel = forward_registers_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes)));
  const dim3 grid(static_cast<unsigned>((pair.Tq + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(pair.NH), static_cast<unsigned>(pair.B));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  kernel<<<grid, kRegisterThreads, kBytes, stream>>>(tensors, PairRows<D>::of(pair), scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void forward_registers(const ForwardTensors<T>& tensors, const AttentionPair& pair,
                       cudaStream_t stream) {
  with_head_size(pair.hs, [&]<int D>() { launch_forward<T, D>(tensors, pair, stream); });
}

template void forward_registers<__nv_bfloat16>(const ForwardTensors<__nv_bfloat16>&,
                                               const AttentionPair&, cudaStream_t);
template void forward_registers<__half>(const ForwardTensors<__half>&, const AttentionPair&,
                                        cudaStream_t);

}  // namespace strata::cuda::flash
