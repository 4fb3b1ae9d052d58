#include "model/kernels/cpu/crossentropy.h"

#include <cmath>

namespace strata::cpu {

template <class T>
void softmax_crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets,
                                  int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<long>(n) * Vp;
    T* p = probs + static_cast<long>(n) * Vp;
    // Read the target logit first: probs may alias logits. The loss comes from the logits, not
    // the rounded probability, so it stays exact when that probability underflows.
    const T target_logit = x[targets[n]];
    T max_logit = x[0];
    for (int v = 1; v < V; ++v) max_logit = x[v] > max_logit ? x[v] : max_logit;
    T sum = 0;
    for (int v = 0; v < V; ++v) {
      p[v] = std::exp(x[v] - max_logit);
      sum += p[v];
    }
    const T inv = T(1) / sum;
    for (int v = 0; v < V; ++v) p[v] *= inv;
    for (int v = V; v < Vp; ++v) p[v] = 0;
    losses[n] = std::log(sum) - (target_logit - max_logit);
  }
}

template <class T>
void softmax_crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                                   const T* dlosses, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* p = probs + static_cast<long>(n) * Vp;
    T* d = dlogits + static_cast<long>(n) * Vp;
    const T scale = dlosses[n];
    for (int v = 0; v < V; ++v) d[v] = p[v] * scale;
    for (int v = V; v < Vp; ++v) d[v] = 0;
    d[targets[n]] -= scale;
  }
}

template void softmax_crossentropy_forward<float>(float*, float*, const float*, const std::int32_t*,
                                                  int, int, int);
template void softmax_crossentropy_forward<double>(double*, double*, const double*,
                                                   const std::int32_t*, int, int, int);
template void softmax_crossentropy_backward<float>(float*, const float*, const std::int32_t*,
                                                   const float*, int, int, int);
template void softmax_crossentropy_backward<double>(double*, const double*, const std::int32_t*,
                                                    const double*, int, int, int);

}  // namespace strata::cpu
