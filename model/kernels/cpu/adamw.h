// AdamW (Loshchilov & Hutter) on flat fp32 buffers: decoupled weight decay, bias-corrected moments.
//   m = β1·m + (1−β1)·g ;  v = β2·v + (1−β2)·g²
//   p −= lr · ( m̂ / (√v̂ + eps) + weight_decay · p ),  m̂ = m / (1−β1^t), v̂ = v / (1−β2^t)
// `grad_scale` multiplies g first (gradient clipping and loss-scale removal in one place). The
// per-element arithmetic is model/kernels/adamw_element.h, shared with the CUDA kernel.
#pragma once

namespace strata::cpu {

struct AdamWHyper {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // 0 for tensors that are not decayed
  long long step;      // 1-based step count used for bias correction
  float grad_scale;
};

void adamw_update(float* params, const float* grads, float* m, float* v, long n,
                  const AdamWHyper& hyper);

// Σ g² in double, reproducible (fixed per-thread ranges summed in thread order).
double sum_of_squares(const float* values, long n);

}  // namespace strata::cpu
