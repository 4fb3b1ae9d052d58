#include "model/kernels/cpu/adamw.h"

#include "model/kernels/adamw_element.h"

#include <cmath>
#include <vector>

#include <omp.h>

namespace strata::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, long n,
                  const AdamWHyper& hyper) {
  const AdamWConstants h =
      adamw_constants(hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.grad_scale, hyper.step);
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i)
    adamw_element(params[i], m[i], v[i], grads[i], hyper.weight_decay, h);
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
