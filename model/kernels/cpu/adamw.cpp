#include "model/kernels/cpu/adamw.h"

#include <cmath>
#include <vector>

#include <omp.h>

namespace strata::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, long n,
                  const AdamWHyper& hyper) {
  const float bias1 = 1.0f - std::pow(hyper.beta1, static_cast<float>(hyper.step));
  const float bias2 = 1.0f - std::pow(hyper.beta2, static_cast<float>(hyper.step));
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) {
    const float g = grads[i] * hyper.grad_scale;
    const float mi = hyper.beta1 * m[i] + (1.0f - hyper.beta1) * g;
    const float vi = hyper.beta2 * v[i] + (1.0f - hyper.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / bias1) / (std::sqrt(vi / bias2) + hyper.eps);
    params[i] -= hyper.lr * (update + hyper.weight_decay * params[i]);
  }
}

double sum_of_squares(const float* values, long n) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(static_cast<std::size_t>(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    double sum = 0;
#pragma omp for schedule(static)
    for (long i = 0; i < n; ++i) sum += static_cast<double>(values[i]) * values[i];
    partial[static_cast<std::size_t>(omp_get_thread_num())] = sum;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace strata::cpu
