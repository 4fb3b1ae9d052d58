#include "model/kernels/cpu/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kernels/cpu/vector_math.h"

namespace strata::cpu {

namespace {
constexpr int kSlice = 16;  // channels per thread in the scatter-adds

// Columns [0, live) of a shard are real vocabulary ids (global id < V).
int live_columns(int vocab_begin, int V, int Vl) { return std::clamp(V - vocab_begin, 0, Vl); }
}  // namespace

template <class T>
void embedding_shard_forward(T* out, const std::int32_t* tokens, const T* wte_shard,
                             int vocab_begin, int Vl, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* row = out + static_cast<long>(n) * C;
    const int local = tokens[n] - vocab_begin;
    if (local < 0 || local >= Vl) {
      std::fill(row, row + C, T(0));
      continue;
    }
    std::copy_n(wte_shard + static_cast<long>(local) * C, C, row);
  }
}

template <class T>
void embedding_shard_backward(T* dwte_shard, const T* dout, const std::int32_t* tokens,
                              int vocab_begin, int Vl, int N, int C) {
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = std::min(c0 + kSlice, C);
    for (int n = 0; n < N; ++n) {
      const int local = tokens[n] - vocab_begin;
      if (local < 0 || local >= Vl) continue;
      const T* d = dout + static_cast<long>(n) * C;
      T* row = dwte_shard + static_cast<long>(local) * C;
      for (int c = c0; c < c1; ++c) row[c] += d[c];
    }
  }
}

template <class T>
void position_embedding_forward(T* x, const T* wpe, long row_begin, int rows, int T_, int C) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T* position = wpe + ((row_begin + r) % T_) * C;
    T* row = x + static_cast<long>(r) * C;
    for (int c = 0; c < C; ++c) row[c] += position[c];
  }
}

template <class T>
void position_embedding_backward(T* dwpe, const T* dx, long row_begin, int rows, int T_, int C) {
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = std::min(c0 + kSlice, C);
    for (int r = 0; r < rows; ++r) {
      const T* d = dx + static_cast<long>(r) * C;
      T* position = dwpe + ((row_begin + r) % T_) * C;
      for (int c = c0; c < c1; ++c) position[c] += d[c];
    }
  }
}

template <class T>
void crossentropy_shard_max(T* row_max, const T* logits, int vocab_begin, int V, int N, int Vl) {
  const int live = live_columns(vocab_begin, V, Vl);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<long>(n) * Vl;
    T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
    for (int v = 0; v < live; ++v) m = x[v] > m ? x[v] : m;
    row_max[n] = m;
  }
}

template <class T>
void crossentropy_shard_sums(T* sum_exp, T* target_logit, const T* logits,
                             const std::int32_t* targets, const T* row_max, int vocab_begin, int V,
                             int N, int Vl) {
  const int live = live_columns(vocab_begin, V, Vl);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<long>(n) * Vl;
    const T max = row_max[n];
    T sum = 0;
    // exp_approx (vector_math.h), not std::exp: a vectorised loop instead of a libm call per logit.
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < live; ++v) sum += exp_approx(x[v] - max);
    sum_exp[n] = sum;
    const int local = targets[n] - vocab_begin;
    target_logit[n] = (local >= 0 && local < live) ? x[local] : T(0);
  }
}

template <class T>
void crossentropy_shard_finish(T* losses, T* probs, const T* logits, const T* row_max,
                               const T* sum_exp, const T* target_logit, int vocab_begin, int V,
                               int N, int Vl) {
  const int live = live_columns(vocab_begin, V, Vl);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<long>(n) * Vl;
    T* p = probs + static_cast<long>(n) * Vl;
    const T inv = T(1) / sum_exp[n], max = row_max[n];
    // Below e^-87 (exp_approx's floor) a probability is 0, as with std::exp, not a subnormal.
#pragma omp simd
    for (int v = 0; v < live; ++v) {
      const T d = x[v] - max;
      p[v] = d < T(-87) ? T(0) : exp_approx(d) * inv;
    }
    for (int v = live; v < Vl; ++v) p[v] = 0;
    // From the logits, not the rounded probability: exact even when that underflows.
    losses[n] = std::log(sum_exp[n]) - (target_logit[n] - row_max[n]);
  }
}

template <class T>
void crossentropy_shard_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                                 const T* dlosses, int vocab_begin, int V, int N, int Vl) {
  const int live = live_columns(vocab_begin, V, Vl);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* p = probs + static_cast<long>(n) * Vl;
    T* d = dlogits + static_cast<long>(n) * Vl;
    const T scale = dlosses[n];
    for (int v = 0; v < live; ++v) d[v] = p[v] * scale;
    for (int v = live; v < Vl; ++v) d[v] = 0;
    const int local = targets[n] - vocab_begin;
    if (local >= 0 && local < live) d[local] -= scale;
  }
}

#define STRATA_INSTANTIATE(T)                                                                      \
  template void embedding_shard_forward<T>(T*, const std::int32_t*, const T*, int, int, int, int); \
  template void embedding_shard_backward<T>(T*, const T*, const std::int32_t*, int, int, int,      \
                                            int);                                                  \
  template void position_embedding_forward<T>(T*, const T*, long, int, int, int);                  \
  template void position_embedding_backward<T>(T*, const T*, long, int, int, int);                 \
  template void crossentropy_shard_max<T>(T*, const T*, int, int, int, int);                       \
  template void crossentropy_shard_sums<T>(T*, T*, const T*, const std::int32_t*, const T*, int,   \
                                           int, int, int);                                         \
  template void crossentropy_shard_finish<T>(T*, T*, const T*, const T*, const T*, const T*, int,  \
                                             int, int, int);                                       \
  template void crossentropy_shard_backward<T>(T*, const T*, const std::int32_t*, const T*, int,   \
                                               int, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(double)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
