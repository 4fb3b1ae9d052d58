// The AdamW update of one element, written once for the CPU kernel (model/kernels/cpu/adamw.h)
// and the CUDA kernel (model/kernels/cuda/adamw.h), so both run the same float operations in the
// same order:
//   g = grad · grad_scale
//   m = β1·m + (1−β1)·g ;  v = β2·v + (1−β2)·g²
//   p −= lr · ( m̂ / (√v̂ + eps) + weight_decay · p ),  m̂ = m / (1−β1^t), v̂ = v / (1−β2^t)
// The bias corrections 1−β^t are computed once per update on the host (adamw_constants).
#pragma once

#include <cmath>

#include "model/core/host_device.h"

namespace strata {

struct AdamWConstants {
  float lr, beta1, beta2, eps, grad_scale;
  float bias1, bias2;  // 1 − β1^t, 1 − β2^t
};

// step: the 1-based update count t.
inline AdamWConstants adamw_constants(float lr, float beta1, float beta2, float eps,
                                      float grad_scale, long long step) {
  return AdamWConstants{lr,
                        beta1,
                        beta2,
                        eps,
                        grad_scale,
                        1.0f - std::pow(beta1, static_cast<float>(step)),
                        1.0f - std::pow(beta2, static_cast<float>(step))};
}

STRATA_HOST_DEVICE inline void adamw_element(float& p, float& m, float& v, float grad,
                                             float weight_decay, const AdamWConstants& h) {
  const float g = grad * h.grad_scale;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float update = (m / h.bias1) / (sqrtf(v / h.bias2) + h.eps);
  p -= h.lr * (update + weight_decay * p);
}

}  // namespace strata
