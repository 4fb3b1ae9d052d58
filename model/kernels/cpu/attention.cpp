#include "model/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <omp.h>

#include "model/core/error.h"
#include "model/kernels/attention_merge.h"
#include "model/kernels/cpu/blas.h"
#include "model/kernels/cpu/vector_math.h"

namespace strata::cpu {
namespace {

// Tile sizes. A tile's scores are one GEMM of (kQueryBlock, kKeyBlock) over hs; larger tiles make
// the GEMMs more efficient (the backward pass's five per tile have a depth of only hs, kQueryBlock
// or kKeyBlock) and cut the per-tile work of the online softmax, smaller ones skip more of the
// masked triangle and keep the two scratch tiles in L2 (2 × 128 × 128 floats = 128 KiB). Measured
// on the CI machine's AVX-512 cores (docs/PERFORMANCE.md, "CPU attention"): 128 × 128 was the
// fastest of 64, 128 and 256 in each dimension at T 1k-4k.
constexpr int kQueryBlock = 128;
constexpr int kKeyBlock = 128;

// Where a head's hs values start in row 0 of sequence b of q, k, v or their gradients: head j at
// column j·hs.
template <class T>
T* head_rows(AttentionRows<T> rows, int b, int head, int hs) {
  return rows.row(b, 0) + static_cast<long>(head) * hs;
}

// A tile's probabilities rounded to the dtype they are stored in on the GPU (precision.h).
template <class T>
void round_tile(T* tile, int rows, int cols, int ld, ComputeDtype dtype) {
  if (dtype == ComputeDtype::fp32) return;
  for (int i = 0; i < rows; ++i) round_span(tile + static_cast<long>(i) * ld, cols, dtype);
}

// The keys of query row t that exist: [0, visible_keys(t)) of the chunk's Tk.
long visible_keys(const AttentionChunk& c, long t) {
  return std::clamp(t + c.causal_offset + 1, 0L, static_cast<long>(c.Tk));
}

void check_heads(const AttentionChunk& c) {
  STRATA_CHECK(c.NH > 0 && c.KV > 0 && c.NH % c.KV == 0 && c.hs > 0, "attention: ", c.NH,
               " query heads and ", c.KV, " key/value heads of size ", c.hs);
}

// `per_thread` elements for each of the threads the pass will run, from the caller's scratch.
template <class T>
T* thread_scratch(std::vector<T>& scratch, int threads, std::size_t per_thread) {
  const std::size_t needed = static_cast<std::size_t>(threads) * per_thread;
  if (scratch.size() < needed) scratch.resize(needed);
  return scratch.data();
}

// The running state of one query block's online softmax: per row, the largest score so far and
// the sum of exp(score − that maximum).
template <class T>
struct OnlineSoftmax {
  T max[kQueryBlock];
  T sum[kQueryBlock];
};

// One tile row of the forward pass: scores s[0, cols) of which the first `visible` are keys the
// row sees. Turns them into exp(score − new maximum) (0 past `visible`), updates the row's state
// and returns the factor by which its output so far must be scaled.
template <class T>
T softmax_tile_row(T* s, int cols, int visible, T& row_max, T& row_sum) {
  T tile_max = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : tile_max)
  for (int j = 0; j < cols; ++j) tile_max = (j < visible && s[j] > tile_max) ? s[j] : tile_max;
  const T new_max = std::max(row_max, tile_max);
  // The first tile of a row: nothing to rescale (exp_approx clamps, so −∞ is not taken to 0).
  const T rescale =
      row_max == -std::numeric_limits<T>::infinity() ? T(0) : exp_approx(row_max - new_max);
  T tile_sum = 0;
#pragma omp simd reduction(+ : tile_sum)
  for (int j = 0; j < cols; ++j) {
    s[j] = j < visible ? exp_approx(s[j] - new_max) : T(0);
    tile_sum += s[j];
  }
  row_max = new_max;
  row_sum = row_sum * rescale + tile_sum;
  return rescale;
}

// Query rows [r0, r1) of one (sequence, query head) against its key/value head: y (row stride
// ldy) overwritten with their attention, lse_rows[r0, r1) with their log-sum-exps (when not null).
template <class T>
void forward_query_block(T* y, long ldy, T* lse_rows, const T* q, long ldq, const T* k, const T* v,
                         long ldkv, int r0, int r1, const AttentionChunk& c, T scale, T* tile) {
  const int rows = r1 - r0;
  OnlineSoftmax<T> state;
  for (int i = 0; i < rows; ++i) {
    state.max[i] = -std::numeric_limits<T>::infinity();
    state.sum[i] = 0;
    std::fill_n(y + (r0 + i) * ldy, c.hs, T(0));
  }
  const long key_end = visible_keys(c, r1 - 1);
  for (long c0 = 0; c0 < key_end; c0 += kKeyBlock) {
    const int cols = static_cast<int>(std::min<long>(kKeyBlock, key_end - c0));
    // tile (rows, cols) = scale · q[r0:r1] · k[c0:c0+cols]ᵀ
    gemm(false, true, rows, cols, c.hs, scale, q + r0 * ldq, static_cast<int>(ldq), k + c0 * ldkv,
         static_cast<int>(ldkv), T(0), tile, kKeyBlock);
    for (int i = 0; i < rows; ++i) {
      const int visible =
          static_cast<int>(std::clamp(visible_keys(c, r0 + i) - c0, 0L, long{cols}));
      const T rescale =
          softmax_tile_row(tile + i * kKeyBlock, cols, visible, state.max[i], state.sum[i]);
      if (rescale != T(1)) {
        T* row = y + (r0 + i) * ldy;
#pragma omp simd
        for (int d = 0; d < c.hs; ++d) row[d] *= rescale;
      }
    }
    // y[r0:r1] += tile · v[c0:c0+cols]
    gemm(false, false, rows, c.hs, cols, T(1), tile, kKeyBlock, v + c0 * ldkv,
         static_cast<int>(ldkv), T(1), y + r0 * ldy, static_cast<int>(ldy));
  }
  for (int i = 0; i < rows; ++i) {
    const T sum = state.sum[i];
    if (sum > T(0)) {
      const T inverse = T(1) / sum;
      T* row = y + (r0 + i) * ldy;
#pragma omp simd
      for (int d = 0; d < c.hs; ++d) row[d] *= inverse;
    }
    if (lse_rows != nullptr)
      lse_rows[r0 + i] =
          sum > T(0) ? state.max[i] + std::log(sum) : -std::numeric_limits<T>::infinity();
  }
}

}  // namespace

// (sequence, query head) pairs run in parallel; the GEMM libraries (OpenMP builds, blas.h) run a
// GEMM called inside a parallel region on its calling thread, so the cores are not oversubscribed.
template <class T>
void attention_chunk_forward(AttentionRows<T> out, AttentionStats<T> lse, AttentionRows<const T> q,
                             AttentionRows<const T> k, AttentionRows<const T> v,
                             const AttentionChunk& c, std::vector<T>& scratch) {
  check_heads(c);
  STRATA_CHECK(v.row_stride == k.row_stride, "attention: k and v share a row stride");
  const int group = c.NH / c.KV;
  const T scale = T(1) / std::sqrt(T(c.hs));
  const int threads = omp_get_max_threads();
  const std::size_t per_thread = static_cast<std::size_t>(kQueryBlock) * kKeyBlock;
  T* tiles = thread_scratch(scratch, threads, per_thread);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int bh = 0; bh < c.B * c.NH; ++bh) {
    const int b = bh / c.NH, h = bh % c.NH;
    T* tile = tiles + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    T* lse_rows = lse.data == nullptr ? nullptr : lse.head(b, h);
    for (int r0 = 0; r0 < c.Tq; r0 += kQueryBlock)
      forward_query_block(head_rows(out, b, h, c.hs), out.row_stride, lse_rows,
                          head_rows(q, b, h, c.hs), q.row_stride, head_rows(k, b, h / group, c.hs),
                          head_rows(v, b, h / group, c.hs), k.row_stride, r0,
                          std::min(r0 + kQueryBlock, c.Tq), c, scale, tile);
  }
}

template <class T>
void attention_merge(AttentionRows<T> out, AttentionStats<T> lse, AttentionRows<const T> part,
                     AttentionStats<const T> part_lse, const AttentionChunk& c) {
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < c.B * c.NH; ++bh) {
    const int b = bh / c.NH, h = bh % c.NH;
    for (int t = 0; t < c.Tq; ++t) {
      const AttentionMergeWeights<T> w =
          attention_merge_weights(lse.head(b, h)[t], part_lse.head(b, h)[t]);
      T* row = out.row(b, t) + static_cast<long>(h) * c.hs;
      const T* other = part.row(b, t) + static_cast<long>(h) * c.hs;
#pragma omp simd
      for (int d = 0; d < c.hs; ++d) row[d] = row[d] * w.own + other[d] * w.part;
      lse.head(b, h)[t] = w.lse;
    }
  }
}

template <class T>
void attention_delta(AttentionStats<T> delta, AttentionRows<const T> dout,
                     AttentionRows<const T> out, const AttentionChunk& c) {
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < c.B * c.NH; ++bh) {
    const int b = bh / c.NH, h = bh % c.NH;
    for (int t = 0; t < c.Tq; ++t) {
      const T* dy = dout.row(b, t) + static_cast<long>(h) * c.hs;
      const T* y = out.row(b, t) + static_cast<long>(h) * c.hs;
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < c.hs; ++d) dot += dy[d] * y[d];
      delta.head(b, h)[t] = dot;
    }
  }
}

// (sequence, key/value head) pairs run in parallel: the query heads of one group add into the
// same dK and dV rows, so one thread takes them in turn, in the group's order, which keeps the sums
// deterministic without atomics. Grouped heads thus give B·KV parallel items rather than B·NH.
// Per tile (rows r0..r1 of query head h, keys c0..c0+cols):
//   P  = exp(scale · q kᵀ − lse)          (0 where masked), rounded to probs_dtype
//   dP = dout · vᵀ ;  dS = P ⊙ (dP − D)
//   dv += Pᵀ · dout ;  dk += scale · dSᵀ · q ;  dq += scale · dS · k
namespace {

// Two tiles per thread.
constexpr std::size_t kBackwardTile = static_cast<std::size_t>(kQueryBlock) * kKeyBlock;
std::size_t backward_scratch(int threads) {
  return static_cast<std::size_t>(threads) * 2 * kBackwardTile;
}

template <class T>
void chunk_backward(AttentionRows<T> dq, AttentionRows<T> dk, AttentionRows<T> dv,
                    AttentionRows<const T> dout, AttentionStats<const T> lse,
                    AttentionStats<const T> delta, AttentionRows<const T> q,
                    AttentionRows<const T> k, AttentionRows<const T> v, const AttentionChunk& c,
                    ComputeDtype probs_dtype, int threads, T* tiles) {
  check_heads(c);
  const int group = c.NH / c.KV;
  const T scale = T(1) / std::sqrt(T(c.hs));
  const std::size_t tile_size = kBackwardTile;
  const int ldq = static_cast<int>(q.row_stride), ldkv = static_cast<int>(k.row_stride);
  const int lddq = static_cast<int>(dq.row_stride), lddkv = static_cast<int>(dk.row_stride);
  const int lddo = static_cast<int>(dout.row_stride);
  STRATA_CHECK(v.row_stride == k.row_stride && dv.row_stride == dk.row_stride,
               "attention: k and v (and dk and dv) share a row stride");
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int bg = 0; bg < c.B * c.KV; ++bg) {
    const int b = bg / c.KV, g = bg % c.KV;
    T* p = tiles + static_cast<std::size_t>(omp_get_thread_num()) * 2 * tile_size;
    T* ds = p + tile_size;
    const T* kg = head_rows(k, b, g, c.hs);
    const T* vg = head_rows(v, b, g, c.hs);
    T* dkg = head_rows(dk, b, g, c.hs);
    T* dvg = head_rows(dv, b, g, c.hs);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const T* qh = head_rows(q, b, h, c.hs);
      const T* dy = head_rows(dout, b, h, c.hs);
      T* dqh = head_rows(dq, b, h, c.hs);
      const T* lse_rows = lse.head(b, h);
      const T* delta_rows = delta.head(b, h);
      // r0 is a long so that r0 times a row stride is computed in 64 bits.
      for (long r0 = 0; r0 < c.Tq; r0 += kQueryBlock) {
        const int rows = static_cast<int>(std::min<long>(kQueryBlock, c.Tq - r0));
        const long key_end = visible_keys(c, r0 + rows - 1);
        for (long c0 = 0; c0 < key_end; c0 += kKeyBlock) {
          const int cols = static_cast<int>(std::min<long>(kKeyBlock, key_end - c0));
          gemm(false, true, rows, cols, c.hs, scale, qh + r0 * ldq, ldq, kg + c0 * ldkv, ldkv, T(0),
               p, kKeyBlock);
          for (int i = 0; i < rows; ++i) {
            const int visible =
                static_cast<int>(std::clamp(visible_keys(c, r0 + i) - c0, 0L, long{cols}));
            const T row_lse = lse_rows[r0 + i];
            T* pi = p + i * kKeyBlock;
#pragma omp simd
            for (int j = 0; j < cols; ++j) pi[j] = j < visible ? exp_approx(pi[j] - row_lse) : T(0);
          }
          round_tile(p, rows, cols, kKeyBlock, probs_dtype);
          // dP (rows, cols) = dout[r0:r1] · v[c0:c0+cols]ᵀ, then dS in place
          gemm(false, true, rows, cols, c.hs, T(1), dy + r0 * lddo, lddo, vg + c0 * ldkv, ldkv,
               T(0), ds, kKeyBlock);
          for (int i = 0; i < rows; ++i) {
            const T row_delta = delta_rows[r0 + i];
            const T* pi = p + i * kKeyBlock;
            T* dsi = ds + i * kKeyBlock;
#pragma omp simd
            for (int j = 0; j < cols; ++j) dsi[j] = pi[j] * (dsi[j] - row_delta);
          }
          gemm(true, false, cols, c.hs, rows, T(1), p, kKeyBlock, dy + r0 * lddo, lddo, T(1),
               dvg + c0 * lddkv, lddkv);
          gemm(true, false, cols, c.hs, rows, scale, ds, kKeyBlock, qh + r0 * ldq, ldq, T(1),
               dkg + c0 * lddkv, lddkv);
          gemm(false, false, rows, c.hs, cols, scale, ds, kKeyBlock, kg + c0 * ldkv, ldkv, T(1),
               dqh + r0 * lddq, lddq);
        }
      }
    }
  }
}

}  // namespace

template <class T>
void attention_chunk_backward(AttentionRows<T> dq, AttentionRows<T> dk, AttentionRows<T> dv,
                              AttentionRows<const T> dout, AttentionStats<const T> lse,
                              AttentionStats<const T> delta, AttentionRows<const T> q,
                              AttentionRows<const T> k, AttentionRows<const T> v,
                              const AttentionChunk& c, ComputeDtype probs_dtype,
                              std::vector<T>& scratch) {
  const int threads = omp_get_max_threads();
  if (scratch.size() < backward_scratch(threads)) scratch.resize(backward_scratch(threads));
  chunk_backward(dq, dk, dv, dout, lse, delta, q, k, v, c, probs_dtype, threads, scratch.data());
}

namespace {

// The packed qkv (attention.h) as the three operands of a chunk pair of a sequence with itself.
template <class T>
struct PackedHeads {
  PackedHeads(T* qkv, int T_, int C, int NH, int KV) {
    STRATA_CHECK(NH > 0 && C % NH == 0 && KV > 0 && NH % KV == 0, "attention: ", NH,
                 " query heads and ", KV, " key/value heads over ", C, " channels");
    const int hs = C / NH;
    const long C3 = C + 2L * KV * hs;
    q = {qkv, C3, C3 * T_};
    k = {qkv + C, C3, C3 * T_};
    v = {qkv + C + static_cast<long>(KV) * hs, C3, C3 * T_};
  }
  AttentionRows<T> q, k, v;
};

AttentionChunk whole_sequences(int B, int T_, int C, int NH, int KV) {
  return {B, T_, T_, NH, KV, C / NH, 0};
}

}  // namespace

template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                       std::vector<T>& scratch) {
  const PackedHeads<const T> packed(qkv, T_, C, NH, KV);
  attention_chunk_forward<T>({out, C, static_cast<long>(T_) * C},
                             {lse, T_, static_cast<long>(NH) * T_}, packed.q, packed.k, packed.v,
                             whole_sequences(B, T_, C, NH, KV), scratch);
}

template <class T>
void attention_forward_rows(T* out, const T* qkv, int t0, int T_, int C, int NH, int KV) {
  const PackedHeads<const T> packed(qkv, T_, C, NH, KV);
  AttentionRows<const T> new_rows = packed.q;
  new_rows.data += static_cast<long>(t0) * new_rows.row_stride;
  AttentionChunk chunk = whole_sequences(1, T_, C, NH, KV);
  chunk.Tq = T_ - t0;
  chunk.causal_offset = t0;
  std::vector<T> scratch;
  attention_chunk_forward<T>({out, C, static_cast<long>(chunk.Tq) * C}, {}, new_rows, packed.k,
                             packed.v, chunk, scratch);
}

// Scratch: delta (B, NH, T), then the threads' tiles.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int T_, int C, int NH, int KV, ComputeDtype probs_dtype,
                        std::vector<T>& scratch) {
  const PackedHeads<const T> packed(qkv, T_, C, NH, KV);
  const PackedHeads<T> grads(dqkv, T_, C, NH, KV);
  const AttentionChunk chunk = whole_sequences(B, T_, C, NH, KV);
  const int threads = omp_get_max_threads();
  const std::size_t delta_size = static_cast<std::size_t>(B) * NH * T_;
  if (scratch.size() < delta_size + backward_scratch(threads))
    scratch.resize(delta_size + backward_scratch(threads));
  T* delta = scratch.data();
  const AttentionRows<const T> dy{dout, C, static_cast<long>(T_) * C};
  attention_delta<T>({delta, T_, static_cast<long>(NH) * T_}, dy,
                     {out, C, static_cast<long>(T_) * C}, chunk);
  std::fill_n(dqkv, static_cast<long>(B) * T_ * packed.q.row_stride, T(0));
  chunk_backward<T>(grads.q, grads.k, grads.v, dy, {lse, T_, static_cast<long>(NH) * T_},
                    {delta, T_, static_cast<long>(NH) * T_}, packed.q, packed.k, packed.v, chunk,
                    probs_dtype, threads, delta + delta_size);
}

#define STRATA_INSTANTIATE_ATTENTION(T)                                                            \
  template void attention_chunk_forward<T>(                                                        \
      AttentionRows<T>, AttentionStats<T>, AttentionRows<const T>, AttentionRows<const T>,         \
      AttentionRows<const T>, const AttentionChunk&, std::vector<T>&);                             \
  template void attention_merge<T>(AttentionRows<T>, AttentionStats<T>, AttentionRows<const T>,    \
                                   AttentionStats<const T>, const AttentionChunk&);                \
  template void attention_delta<T>(AttentionStats<T>, AttentionRows<const T>,                      \
                                   AttentionRows<const T>, const AttentionChunk&);                 \
  template void attention_chunk_backward<T>(AttentionRows<T>, AttentionRows<T>, AttentionRows<T>,  \
                                            AttentionRows<const T>, AttentionStats<const T>,       \
                                            AttentionStats<const T>, AttentionRows<const T>,       \
                                            AttentionRows<const T>, AttentionRows<const T>,        \
                                            const AttentionChunk&, ComputeDtype, std::vector<T>&); \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int, int, std::vector<T>&);  \
  template void attention_forward_rows<T>(T*, const T*, int, int, int, int, int);                  \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const T*, int, int, int,   \
                                      int, int, ComputeDtype, std::vector<T>&);
STRATA_INSTANTIATE_ATTENTION(float)
STRATA_INSTANTIATE_ATTENTION(double)
#undef STRATA_INSTANTIATE_ATTENTION

}  // namespace strata::cpu
