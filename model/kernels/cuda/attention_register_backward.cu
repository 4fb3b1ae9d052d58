// Flash-attention backward for bf16/fp16 with every score in registers, deterministic like the
// tile kernels (attention_backward.cu): two kernels, each block owning the rows it writes.
//   dK, dV: one block per 64-key tile of a key/value head, 16 keys per warp. Per query tile of
//           each query head of the group in turn (one stream of tiles, double-buffered with their
//           logsumexp and delta), each warp computes Sᵀ = K·Qᵀ and dPᵀ = V·doutᵀ for its keys,
//           Pᵀ = exp2(Sᵀ·scale·log2 e − lse) and dSᵀ = Pᵀ ⊙ (dPᵀ − delta), then dV += Pᵀ·dout
//           and dK += dSᵀ·Q with Pᵀ, dSᵀ repacked as A fragments in registers: the group's sum
//           stays in the same fp32 accumulators.
//   dQ:     one block per 64-query tile of a query head, 16 queries per warp; per key tile of its
//           key/value head (streamed K and V), S = Q·Kᵀ, dP = dout·Vᵀ, P, dS as above, and
//           dQ += dS·K.
// Masks apply only where a tile holds a query and a key it does not see (PairRows::sees: for a
// sequence with itself, where the tile straddles the causal diagonal) or rows past the pair's end.
// dK and dQ are scaled by 1/√hs when stored (overwriting, or added to what the buffers hold in
// fp32 and rounded once). Head sizes up to 64 keep the block's own operand fragments (K and
// V, or Q and dout) in registers for the whole loop; larger ones reload them from shared memory
// each tile (and dK/dV takes 32-query tiles) to stay within 255 registers. The warp-level products
// are attention_registers.cuh's.
#include <cmath>

#include "model/kernels/cuda/attention_kernels.h"
#include "model/kernels/cuda/attention_registers.cuh"
#include "model/kernels/cuda/attention_tile.cuh"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/mma.cuh"

namespace strata::cuda::flash {
namespace {

using namespace mma;

// Two adjacent values of a gradient row, rounded to T: written, or added to the two there (in
// fp32, rounded once).
template <class T>
__device__ __forceinline__ void store_pair(T* dst, float a, float b, bool accumulate) {
  if (accumulate) {
    a += to_float(dst[0]);
    b += to_float(dst[1]);
  }
  *reinterpret_cast<unsigned*>(dst) = pack2<T>(a, b);
}

template <int D>
struct BackwardShape {
  static constexpr bool kHoldOperands = D <= 64;
  static constexpr int kQueryTile = D <= 64 ? 64 : 32;  // dK/dV kernel's streamed query tile
  static constexpr int kSteps = D / 16;                 // k-steps over the head dimension
  static constexpr int kDimGroups = D / 8;              // 8-column accumulators of dK, dV, dQ
  static constexpr int kTile = kBlockRows * kLd<D>;     // elements of a 64-row shared tile
  static constexpr int kQueryTileElements = kQueryTile * kLd<D>;
  // dK/dV: K, V, two Q and two dout buffers (16-bit elements), then two (logsumexp, delta) row
  // pairs.
  static constexpr std::size_t kDkdvBytes =
      2 * (2 * kTile + 4 * kQueryTileElements) + sizeof(float) * 4 * kQueryTile;
  // dQ: Q, dout, two K and two V buffers.
  static constexpr std::size_t kDqBytes = 2 * 6 * kTile;
  static_assert(kDkdvBytes <= kMaxSharedBytes && kDqBytes <= kMaxSharedBytes);
};

template <class T, int D>
__global__ void __launch_bounds__(kRegisterThreads)
    dkdv_registers_kernel(BackwardTensors<T> tensors, PairRows<D> rows, float scale,
                          float scale_log2) {
  using S = BackwardShape<D>;
  constexpr int kQ = S::kQueryTile;
  constexpr int kQueryGroups = kQ / 8;
  extern __shared__ __align__(128) unsigned char shared[];
  T* k_tile = reinterpret_cast<T*>(shared);
  T* v_tile = k_tile + S::kTile;
  T* q_tiles = v_tile + S::kTile;                                                    // two buffers
  T* dy_tiles = q_tiles + 2 * S::kQueryTileElements;                                 // two buffers
  float* lse_rows = reinterpret_cast<float*>(dy_tiles + 2 * S::kQueryTileElements);  // 2 × kQ
  float* delta_rows = lse_rows + 2 * kQ;                                             // 2 × kQ

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int c0 = blockIdx.x * kBlockRows;  // key tile 0 (the most query tiles) starts first
  const int kv = blockIdx.y, b = blockIdx.z;
  const int Tq = rows.Tq;
  const int key[2] = {c0 + warp * kWarpRows + g, c0 + warp * kWarpRows + g + 8};
  // The block's work is one stream of `steps` query tiles: `tiles` per query head of the group,
  // head kv·group first, from the first query that sees the block's first key.
  const int q_begin = rows.first_query(c0);
  const int tiles = q_begin < Tq ? (Tq - q_begin + kQ - 1) / kQ : 0;
  const int steps = tiles * rows.group;
  const auto query_row0 = [&](int step) { return q_begin + step % tiles * kQ; };

  // Step `step`'s query tile into buffer `buffer`: Q and dout asynchronously, the row statistics
  // (base-2 logsumexp, delta; 0 past Tq, where the mask applies) with plain stores.
  const auto stage = [&](int step, int buffer) {
    const int h = kv * rows.group + step / tiles;
    const int r0 = query_row0(step);
    const float* lse_bh = tensors.lse + rows.stat_at(b, h);
    const float* delta_bh = tensors.delta + rows.stat_at(b, h);
    copy_rows_async<T, D, kQ>(q_tiles + buffer * S::kQueryTileElements, tensors.q + rows.q_at(b, h),
                              rows.q_row, r0, Tq);
    copy_rows_async<T, D, kQ>(dy_tiles + buffer * S::kQueryTileElements,
                              tensors.dout + rows.out_at(b, h), rows.out_row, r0, Tq);
    for (int i = threadIdx.x; i < kQ; i += kRegisterThreads) {
      const bool real = r0 + i < Tq;
      lse_rows[buffer * kQ + i] = real ? lse_bh[r0 + i] * kLog2e : 0.0f;
      delta_rows[buffer * kQ + i] = real ? delta_bh[r0 + i] : 0.0f;
    }
  };
  copy_rows_async<T, D, kBlockRows>(k_tile, tensors.k + rows.kv_at(b, kv), rows.kv_row, c0,
                                    rows.Tk);
  copy_rows_async<T, D, kBlockRows>(v_tile, tensors.v + rows.kv_at(b, kv), rows.kv_row, c0,
                                    rows.Tk);
  if (steps > 0) stage(0, 0);
  commit_copies();

  RowFragments<T, S::kSteps, S::kHoldOperands> k_rows(k_tile, kLd<D>, warp * kWarpRows, lane);
  RowFragments<T, S::kSteps, S::kHoldOperands> v_rows(v_tile, kLd<D>, warp * kWarpRows, lane);
  float dk[S::kDimGroups][4], dv[S::kDimGroups][4];
  zero(dk);
  zero(dv);
  for (int step = 0; step < steps; ++step) {
    const int r0 = query_row0(step);
    if (step + 1 < steps) {
      stage(step + 1, (step + 1) % 2);
      commit_copies();
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    if (step == 0) {
      k_rows.hold();
      v_rows.hold();
    }
    const T* q = q_tiles + (step % 2) * S::kQueryTileElements;
    const T* dy = dy_tiles + (step % 2) * S::kQueryTileElements;
    const float* lse_tile = lse_rows + (step % 2) * kQ;
    const float* delta_tile = delta_rows + (step % 2) * kQ;

    // Sᵀ = K·Qᵀ and dPᵀ = V·doutᵀ (rows: this warp's 16 keys; columns: the tile's queries).
    float st[kQueryGroups][4], dpt[kQueryGroups][4];
    product_with_rows<T, S::kSteps>(st, k_rows, q, kLd<D>, lane);
    product_with_rows<T, S::kSteps>(dpt, v_rows, dy, kLd<D>, lane);

    // Pᵀ and dSᵀ in place; masked where a query does not see a key or lies past the pair.
    const bool masked = !rows.sees_all(r0, c0, kBlockRows) || r0 + kQ > Tq;
#pragma unroll
    for (int j = 0; j < kQueryGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int column = j * 8 + 2 * t + (e & 1);
        const int query = r0 + column;
        const bool keep = !masked || (rows.sees(query, key[e / 2]) && query < Tq);
        const float p = keep ? exp2f(st[j][e] * scale_log2 - lse_tile[column]) : 0.0f;
        dpt[j][e] = p * (dpt[j][e] - delta_tile[column]);
        st[j][e] = p;
      }

    // dV += Pᵀ·dout and dK += dSᵀ·Q, over the tile's queries 16 at a time.
    accumulate_product<T>(dv, st, dy, kLd<D>, lane);
    accumulate_product<T>(dk, dpt, q, kLd<D>, lane);
    __syncthreads();  // every warp is done with this buffer before the next stage refills it
  }
  if (steps == 0) wait_copies<0>();  // no query sees these keys: their gradients are 0

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (key[i] >= rows.Tk) continue;
    const long at = rows.kv_at(b, kv) + key[i] * rows.kv_row + 2 * t;
#pragma unroll
    for (int n = 0; n < S::kDimGroups; ++n) {
      store_pair<T>(tensors.dk + at + n * 8, dk[n][2 * i] * scale, dk[n][2 * i + 1] * scale,
                    tensors.accumulate);
      store_pair<T>(tensors.dv + at + n * 8, dv[n][2 * i], dv[n][2 * i + 1], tensors.accumulate);
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kRegisterThreads)
    dq_registers_kernel(BackwardTensors<T> tensors, PairRows<D> rows, float scale,
                        float scale_log2) {
  using S = BackwardShape<D>;
  constexpr int kKeyGroups = kKeyTile / 8;
  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* dy_tile = q_tile + S::kTile;
  T* k_tiles = dy_tile + S::kTile;      // two buffers
  T* v_tiles = k_tiles + 2 * S::kTile;  // two buffers

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int r0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;  // the last query tile starts first
  const int h = blockIdx.y, b = blockIdx.z;
  const int Tq = rows.Tq, Tk = rows.Tk;
  const long kv_row = rows.kv_row;
  const T* k_src = tensors.k + rows.kv_at(b, h / rows.group);
  const T* v_src = tensors.v + rows.kv_at(b, h / rows.group);
  const long stats = rows.stat_at(b, h);
  const int row[2] = {r0 + warp * kWarpRows + g, r0 + warp * kWarpRows + g + 8};
  float lse_row[2], delta_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const bool real = row[i] < Tq;
    lse_row[i] = real ? tensors.lse[stats + row[i]] * kLog2e : 0.0f;
    delta_row[i] = real ? tensors.delta[stats + row[i]] : 0.0f;
  }

  copy_rows_async<T, D, kBlockRows>(q_tile, tensors.q + rows.q_at(b, h), rows.q_row, r0, Tq);
  copy_rows_async<T, D, kBlockRows>(dy_tile, tensors.dout + rows.out_at(b, h), rows.out_row, r0,
                                    Tq);
  copy_rows_async<T, D, kKeyTile>(k_tiles, k_src, kv_row, 0, Tk);
  copy_rows_async<T, D, kKeyTile>(v_tiles, v_src, kv_row, 0, Tk);
  commit_copies();

  RowFragments<T, S::kSteps, S::kHoldOperands> q_rows(q_tile, kLd<D>, warp * kWarpRows, lane);
  RowFragments<T, S::kSteps, S::kHoldOperands> dy_rows(dy_tile, kLd<D>, warp * kWarpRows, lane);
  float dq[S::kDimGroups][4];
  zero(dq);
  // Key tiles up to the last key the block's rows see (the diagonal, for a sequence with itself).
  const int tiles = (rows.key_end(r0, kBlockRows) + kKeyTile - 1) / kKeyTile;
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) {
      const int next = (tile + 1) % 2;
      copy_rows_async<T, D, kKeyTile>(k_tiles + next * S::kTile, k_src, kv_row,
                                      (tile + 1) * kKeyTile, Tk);
      copy_rows_async<T, D, kKeyTile>(v_tiles + next * S::kTile, v_src, kv_row,
                                      (tile + 1) * kKeyTile, Tk);
      commit_copies();
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    if (tile == 0) {
      q_rows.hold();
      dy_rows.hold();
    }
    const T* k = k_tiles + (tile % 2) * S::kTile;
    const T* v = v_tiles + (tile % 2) * S::kTile;

    // S = Q·Kᵀ and dP = dout·Vᵀ (rows: this warp's 16 queries; columns: the tile's keys).
    float s[kKeyGroups][4], dp[kKeyGroups][4];
    product_with_rows<T, S::kSteps>(s, q_rows, k, kLd<D>, lane);
    product_with_rows<T, S::kSteps>(dp, dy_rows, v, kLd<D>, lane);

    // P and dS in place; masked where a row does not see a key (for a sequence with itself, past
    // the diagonal: the last tile only), and for padding query rows.
    const int key0 = tile * kKeyTile;
    const bool masked = !rows.sees_all(r0, key0, kKeyTile);
#pragma unroll
    for (int j = 0; j < kKeyGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const int key = key0 + j * 8 + 2 * t + (e & 1);
        const bool keep = row[i] < Tq && (!masked || rows.sees(row[i], key));
        const float p = keep ? exp2f(s[j][e] * scale_log2 - lse_row[i]) : 0.0f;
        dp[j][e] = p * (dp[j][e] - delta_row[i]);
      }

    // dQ += dS·K over the tile's keys 16 at a time.
    accumulate_product<T>(dq, dp, k, kLd<D>, lane);
    __syncthreads();  // every warp is done with this buffer before the next copy refills it
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row[i] >= Tq) continue;
    T* dst = tensors.dq + rows.q_at(b, h) + row[i] * rows.q_row + 2 * t;
#pragma unroll
    for (int n = 0; n < S::kDimGroups; ++n)
      store_pair<T>(dst + n * 8, dq[n][2 * i] * scale, dq[n][2 * i + 1] * scale,
                    tensors.accumulate);
  }
}

template <class T, int D>
void launch_backward(const BackwardTensors<T>& tensors, const AttentionPair& pair,
                     cudaStream_t stream) {
  using S = BackwardShape<D>;
  const PairRows<D> rows = PairRows<D>::of(pair);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float scale_log2 = scale * kLog2e;
  auto* dkdv = dkdv_registers_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(S::kDkdvBytes)));
  const dim3 key_grid(static_cast<unsigned>((pair.Tk + kBlockRows - 1) / kBlockRows),
                      static_cast<unsigned>(pair.KV), static_cast<unsigned>(pair.B));
  dkdv<<<key_grid, kRegisterThreads, S::kDkdvBytes, stream>>>(tensors, rows, scale, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
  auto* dq = dq_registers_kernel<T, D>;
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(S::kDqBytes)));
  const dim3 query_grid(static_cast<unsigned>((pair.Tq + kBlockRows - 1) / kBlockRows),
                        static_cast<unsigned>(pair.NH), static_cast<unsigned>(pair.B));
  dq<<<query_grid, kRegisterThreads, S::kDqBytes, stream>>>(tensors, rows, scale, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void backward_registers(const BackwardTensors<T>& tensors, const AttentionPair& pair,
                        cudaStream_t stream) {
  with_head_size(pair.hs, [&]<int D>() { launch_backward<T, D>(tensors, pair, stream); });
}

template void backward_registers<__nv_bfloat16>(const BackwardTensors<__nv_bfloat16>&,
                                                const AttentionPair&, cudaStream_t);
template void backward_registers<__half>(const BackwardTensors<__half>&, const AttentionPair&,
                                         cudaStream_t);

}  // namespace strata::cuda::flash
