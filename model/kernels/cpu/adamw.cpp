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
  const float weight_decay = hyper.weight_decay;
  // Private copies of the constants and `simd`: otherwise GCC must assume the stores through
  // params/m/v may change them and reloads them every element, which keeps the loop scalar.
#pragma omp parallel for simd schedule(static) firstprivate(h, weight_decay)
  for (long i = 0; i < n; ++i) adamw_element(params[i], m[i], v[i], grads[i], weight_decay, h);
}

double sum_of_squares(const float* values, long n) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(static_cast<std::size_t>(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    // Each thread sums its own contiguous chunk, split across vector lanes by `simd`: a fixed
    // order for a given thread count, so the result is reproducible run to run.
    const long t = omp_get_thread_num(), team = omp_get_num_threads();
    const long begin = n * t / team, end = n * (t + 1) / team;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (long i = begin; i < end; ++i) sum += static_cast<double>(values[i]) * values[i];
    partial[static_cast<std::size_t>(t)] = sum;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace strata::cpu
