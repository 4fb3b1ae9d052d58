#include "model/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "model/core/error.h"
#include "model/kernels/cpu/blas.h"
#include "model/kernels/cpu/vector_math.h"

namespace strata::cpu {
namespace {

// Causal blocking: query rows are taken in blocks of kRowBlock, and a block of rows [r0, r1) only
// needs keys [0, r1). Computing just those columns (and, in the backward pass, only the rows at or
// below a block of keys) skips most of the masked upper triangle: for T = 256 the attention GEMMs
// do 10/16 of the full (T, T) work. Smaller blocks skip more but make the GEMMs less efficient.
constexpr int kRowBlock = 64;

// The row loops below run over whole vectors: [0, t] rounded up to a multiple of kLanes (within
// the row), with the entries past t masked out, instead of stopping at t. GCC leaves the remainder
// of a loop scalar, and with rows of a few hundred entries that scalar tail (a chain of dependent
// max or add instructions) took over half of the softmax's time.
constexpr int kLanes = 16;  // floats in an AVX-512 register

// t + 1 rounded up to whole vectors, at most `end`.
int vector_span(int t, int end) { return std::min(end, (t + kLanes) / kLanes * kLanes); }

// row[0..t] = softmax(row[0..t]), row[t+1..T) = 0.
template <class T>
void causal_softmax_row(T* row, int t, int T_) {
  const int span = vector_span(t, T_);
  T max_score = row[0];
#pragma omp simd reduction(max : max_score)
  for (int s = 0; s < span; ++s) max_score = (s <= t && row[s] > max_score) ? row[s] : max_score;
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int s = 0; s < span; ++s) {
    row[s] = s <= t ? exp_approx(row[s] - max_score) : T(0);
    sum += row[s];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (int s = 0; s < span; ++s) row[s] *= inv;
  std::fill(row + span, row + T_, T(0));
}

// drow[0..t] = p ⊙ (drow − Σ_s p·drow) (softmax backward), drow[t+1..r_end) = 0. prow is zero past
// t (causal_softmax_row) and drow finite, so the entries past t contribute 0 and become 0.
template <class T>
void causal_softmax_backward_row(T* drow, const T* prow, int t, int r_end) {
  const int span = vector_span(t, r_end);
  T dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int s = 0; s < span; ++s) dot += prow[s] * drow[s];
#pragma omp simd
  for (int s = 0; s < span; ++s) drow[s] = prow[s] * (drow[s] - dot);
  std::fill(drow + span, drow + r_end, T(0));
}

// Query rows [r0, r1) of one (sequence, head): p (r1 − r0, ldp ≥ r1) receives their softmax over
// keys [0, r1), zero past each row's diagonal up to ldp. q and k point at row 0 of the head in a
// packed qkv (row stride C3). Both passes compute probabilities only here, so the backward pass
// recomputes exactly the values the forward pass used.
template <class T>
void row_block_probabilities(T* p, int ldp, const T* q, const T* k, int r0, int r1, int hs, int C3,
                             T scale) {
  // scores (rows, r1) = scale · q[r0:r1] · k[0:r1]ᵀ
  gemm(false, true, r1 - r0, r1, hs, scale, q + static_cast<long>(r0) * C3, C3, k, C3, T(0), p,
       ldp);
  for (int t = r0; t < r1; ++t) causal_softmax_row(p + static_cast<long>(t - r0) * ldp, t, ldp);
}

// Query rows [r0, r1) attend to keys and values [0, r1): the unit both forward passes are made of.
// y points at query row r0 of the output (row stride ldy); p is the row block's scratch.
template <class T>
void attend_row_block(T* y, int ldy, T* p, int ldp, const T* q, const T* k, const T* v, int r0,
                      int r1, int hs, int C3, T scale) {
  row_block_probabilities(p, ldp, q, k, r0, r1, hs, C3, scale);
  // y[r0:r1] (rows, hs) = probs[r0:r1, 0:r1] · v[0:r1]
  gemm(false, false, r1 - r0, hs, r1, T(1), p, ldp, v, C3, T(0), y, ldy);
}

// Where a head's columns start in a qkv row (attention.h): query head h at h·hs, its key/value
// head h / group in the k and v parts after all NH query heads.
struct HeadColumns {
  HeadColumns(int C, int NH, int KV) {
    STRATA_CHECK(NH > 0 && C % NH == 0 && KV > 0 && NH % KV == 0, "attention: ", NH,
                 " query heads and ", KV, " key/value heads over ", C, " channels");
    hs = C / NH;
    group = NH / KV;
    C3 = C + 2 * KV * hs;
    k0 = C;
    v0 = C + KV * hs;
  }
  int query(int h) const { return h * hs; }
  int key(int h) const { return k0 + h / group * hs; }
  int value(int h) const { return v0 + h / group * hs; }

  int hs = 0;     // head size
  int group = 0;  // query heads per key/value head
  int C3 = 0;     // qkv row stride, (NH + 2·KV)·hs
  int k0 = 0, v0 = 0;
};

// `per_thread` elements for each of the threads the pass will run, from the caller's scratch.
template <class T>
T* thread_scratch(std::vector<T>& scratch, int threads, std::size_t per_thread) {
  const std::size_t needed = static_cast<std::size_t>(threads) * per_thread;
  if (scratch.size() < needed) scratch.resize(needed);
  return scratch.data();
}

}  // namespace

// (b, h) pairs run in parallel; the GEMM libraries (OpenMP builds, blas.h) run a GEMM called inside
// a parallel region on its calling thread, so the cores are not oversubscribed.
template <class T>
void attention_forward(T* out, const T* qkv, int B, int T_, int C, int NH, int KV,
                       std::vector<T>& scratch) {
  const HeadColumns heads(C, NH, KV);
  const int hs = heads.hs;
  const T scale = T(1) / std::sqrt(T(hs));
  const int C3 = heads.C3;
  const int threads = omp_get_max_threads();
  const std::size_t per_thread = static_cast<std::size_t>(std::min(kRowBlock, T_)) * T_;
  T* probs = thread_scratch(scratch, threads, per_thread);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH;
    const int h = bh % NH;
    const T* row0 = qkv + static_cast<long>(b) * T_ * C3;
    T* p = probs + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    T* y = out + static_cast<long>(b) * T_ * C + h * hs;
    for (int r0 = 0; r0 < T_; r0 += kRowBlock) {
      const int r1 = std::min(r0 + kRowBlock, T_);
      attend_row_block(y + static_cast<long>(r0) * C, C, p, T_, row0 + heads.query(h),
                       row0 + heads.key(h), row0 + heads.value(h), r0, r1, hs, C3, scale);
    }
  }
}

// Heads run in parallel, each thread with its own probabilities for one row block: they are not
// kept, as no backward pass follows.
template <class T>
void attention_forward_rows(T* out, const T* qkv, int t0, int T_, int C, int NH, int KV) {
  const HeadColumns heads(C, NH, KV);
  const int hs = heads.hs;
  const T scale = T(1) / std::sqrt(T(hs));
  const int C3 = heads.C3;
  const int block = std::min(kRowBlock, T_ - t0);
  const int threads = omp_get_max_threads();
  std::vector<T> scratch(static_cast<std::size_t>(threads) * block * T_);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int h = 0; h < NH; ++h) {
    T* p = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * block * T_;
    for (int r0 = t0; r0 < T_; r0 += block) {
      const int r1 = std::min(r0 + block, T_);
      attend_row_block(out + static_cast<long>(r0 - t0) * C + h * hs, C, p, T_,
                       qkv + heads.query(h), qkv + heads.key(h), qkv + heads.value(h), r0, r1, hs,
                       C3, scale);
    }
  }
}

// (b, key/value head) pairs run in parallel: the query heads of one group add into the same dK and
// dV rows, so one thread takes them in turn, in the group's order (the first overwrites, the
// others accumulate through the GEMMs' beta), which keeps the sums deterministic without atomics.
// Grouped heads thus give B·KV parallel items rather than B·NH.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, int B, int T_, int C, int NH, int KV,
                        ComputeDtype probs_dtype, std::vector<T>& scratch) {
  const HeadColumns heads(C, NH, KV);
  const int hs = heads.hs;
  const T scale = T(1) / std::sqrt(T(hs));
  const int C3 = heads.C3;
  const int threads = omp_get_max_threads();
  const std::size_t square = static_cast<std::size_t>(T_) * T_;
  T* matrices = thread_scratch(scratch, threads, 2 * square);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bg = 0; bg < B * KV; ++bg) {
    const int b = bg / KV;
    const int first = bg % KV * heads.group;  // the group's first query head
    const long row0 = static_cast<long>(b) * T_ * C3;
    const T* k = qkv + row0 + heads.key(first);
    const T* v = qkv + row0 + heads.value(first);
    T* dk = dqkv + row0 + heads.key(first);
    T* dv = dqkv + row0 + heads.value(first);
    // probs and dscores (T, T); per row block only columns [0, r1) are read.
    T* p = matrices + static_cast<std::size_t>(omp_get_thread_num()) * 2 * square;
    T* ds = p + square;
    for (int h = first; h < first + heads.group; ++h) {
      const T kv_beta = h == first ? T(0) : T(1);  // dk, dv: overwrite, then accumulate
      const T* q = qkv + row0 + heads.query(h);
      T* dq = dqkv + row0 + heads.query(h);
      const T* dy = dout + static_cast<long>(b) * T_ * C + h * hs;
      for (int r0 = 0; r0 < T_; r0 += kRowBlock) {
        const int r1 = std::min(r0 + kRowBlock, T_);
        row_block_probabilities(p + static_cast<long>(r0) * T_, T_, q, k, r0, r1, hs, C3, scale);
      }
      round_span(p, static_cast<long>(square), probs_dtype);
      for (int r0 = 0; r0 < T_; r0 += kRowBlock) {
        const int r1 = std::min(r0 + kRowBlock, T_);
        const int rows = r1 - r0;
        const long at = static_cast<long>(r0) * T_;
        // dprobs[r0:r1, 0:r1] = dy[r0:r1] · v[0:r1]ᵀ, then the softmax backward in place
        gemm(false, true, rows, r1, hs, T(1), dy + static_cast<long>(r0) * C, C, v, C3, T(0),
             ds + at, T_);
        for (int t = r0; t < r1; ++t) {
          causal_softmax_backward_row(ds + static_cast<long>(t) * T_, p + static_cast<long>(t) * T_,
                                      t, r1);
        }
        // dq[r0:r1] = scale · dscores[r0:r1, 0:r1] · k[0:r1]
        gemm(false, false, rows, hs, r1, scale, ds + at, T_, k, C3, T(0),
             dq + static_cast<long>(r0) * C3, C3);
      }
      // Key blocks [c0, c1) receive gradient only from query rows t >= c0.
      for (int c0 = 0; c0 < T_; c0 += kRowBlock) {
        const int c1 = std::min(c0 + kRowBlock, T_);
        const int cols = c1 - c0;
        const int rows = T_ - c0;
        const long at = static_cast<long>(c0) * T_ + c0;
        // dv[c0:c1] (+)= probs[c0:T, c0:c1]ᵀ · dy[c0:T] ;
        // dk[c0:c1] (+)= scale · dscores[c0:T, c0:c1]ᵀ · q[c0:T]
        gemm(true, false, cols, hs, rows, T(1), p + at, T_, dy + static_cast<long>(c0) * C, C,
             kv_beta, dv + static_cast<long>(c0) * C3, C3);
        gemm(true, false, cols, hs, rows, scale, ds + at, T_, q + static_cast<long>(c0) * C3, C3,
             kv_beta, dk + static_cast<long>(c0) * C3, C3);
      }
    }
  }
}

template void attention_forward<float>(float*, const float*, int, int, int, int, int,
                                       std::vector<float>&);
template void attention_forward<double>(double*, const double*, int, int, int, int, int,
                                        std::vector<double>&);
template void attention_forward_rows<float>(float*, const float*, int, int, int, int, int);
template void attention_forward_rows<double>(double*, const double*, int, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, int, int, int, int, int,
                                        ComputeDtype, std::vector<float>&);
template void attention_backward<double>(double*, const double*, const double*, int, int, int, int,
                                         int, ComputeDtype, std::vector<double>&);

}  // namespace strata::cpu
