#include "model/kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include <omp.h>

#include "model/kernels/cpu/blas.h"

namespace strata::cpu {

// (b, h) pairs run in parallel; with the OpenMP build of OpenBLAS the GEMMs inside a parallel
// region run single-threaded, so the cores are not oversubscribed.
template <class T>
void attention_forward(T* out, T* probs, const T* qkv, int B, int T_, int C, int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const long C3 = 3L * C;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH;
    const int h = bh % NH;
    const T* q = qkv + b * T_ * C3 + h * hs;
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* p = probs + static_cast<long>(bh) * T_ * T_;
    // scores (T, T) = scale · q · kᵀ (the upper triangle is computed but masked below)
    gemm(false, true, T_, T_, hs, scale, q, static_cast<int>(C3), k, static_cast<int>(C3), T(0), p,
         T_);
    for (int t = 0; t < T_; ++t) {
      T* row = p + static_cast<long>(t) * T_;
      T max_score = row[0];
      for (int s = 1; s <= t; ++s) max_score = row[s] > max_score ? row[s] : max_score;
      T sum = 0;
      for (int s = 0; s <= t; ++s) {
        row[s] = std::exp(row[s] - max_score);
        sum += row[s];
      }
      const T inv = T(1) / sum;
      for (int s = 0; s <= t; ++s) row[s] *= inv;
      for (int s = t + 1; s < T_; ++s) row[s] = 0;
    }
    // out (T, hs) = probs · v
    gemm(false, false, T_, hs, T_, T(1), p, T_, v, static_cast<int>(C3), T(0),
         out + static_cast<long>(b) * T_ * C + h * hs, C);
  }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int B, int T_, int C,
                        int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const int C3 = 3 * C;
  const int threads = omp_get_max_threads();
  std::vector<T> scratch(static_cast<std::size_t>(threads) * T_ * T_);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH;
    const int h = bh % NH;
    const long q_off = static_cast<long>(b) * T_ * C3 + h * hs;
    const T* q = qkv + q_off;
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* dq = dqkv + q_off;
    T* dk = dq + C;
    T* dv = dq + 2 * C;
    const T* p = probs + static_cast<long>(bh) * T_ * T_;
    const T* dy = dout + static_cast<long>(b) * T_ * C + h * hs;
    T* dp = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * T_ * T_;
    // dprobs (T, T) = dy · vᵀ ;  dv (T, hs) = probsᵀ · dy
    gemm(false, true, T_, T_, hs, T(1), dy, C, v, C3, T(0), dp, T_);
    gemm(true, false, T_, hs, T_, T(1), p, T_, dy, C, T(0), dv, C3);
    // softmax backward in place: dscore = p ⊙ (dp − Σ_s p·dp), zero above the diagonal
    for (int t = 0; t < T_; ++t) {
      const T* prow = p + static_cast<long>(t) * T_;
      T* drow = dp + static_cast<long>(t) * T_;
      T dot = 0;
      for (int s = 0; s <= t; ++s) dot += prow[s] * drow[s];
      for (int s = 0; s <= t; ++s) drow[s] = prow[s] * (drow[s] - dot);
      for (int s = t + 1; s < T_; ++s) drow[s] = 0;
    }
    // dq = scale · dscore · k ;  dk = scale · dscoreᵀ · q
    gemm(false, false, T_, hs, T_, scale, dp, T_, k, C3, T(0), dq, C3);
    gemm(true, false, T_, hs, T_, scale, dp, T_, q, C3, T(0), dk, C3);
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int,
                                        int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int,
                                         int, int, int);

}  // namespace strata::cpu
