// Adafactor's arithmetic of one element (train/optimizer/adafactor.h), written once so that a
// device kernel runs the float operations the CPU optimizer runs (docs/ARCHITECTURE.md §2). The
// form is torch.optim.Adafactor's:
//   row_var ← row_var + w·(mean_j g² − row_var), col_var likewise over i, w = 1 − β2_t = t^decay
//   var     = row_var_i · col_var_j / max(mean_i row_var, eps1)  (a vector: its own EMA of g²)
//   u       = g / √max(var, eps1²)
// The tensor's RMS(u) and the step size are applied by the caller (adafactor_apply).
#pragma once

#include <cmath>

#include "model/core/host_device.h"

namespace strata {

// The exponential moving average step of torch's lerp: stat + w·(sample − stat).
STRATA_HOST_DEVICE inline float adafactor_ema(float stat, float sample, float weight) {
  return stat + weight * (sample - stat);
}

// The factored variance of element (i, j) of a matrix: row_var_i · col_var_j / row_mean, where
// row_mean is max(mean of the row variances, eps1).
STRATA_HOST_DEVICE inline float adafactor_variance(float row_var, float col_var, float row_mean) {
  return row_var * col_var / row_mean;
}

// The unscaled update: g / √max(var, eps1²).
STRATA_HOST_DEVICE inline float adafactor_update(float g, float variance, float eps1_squared) {
  return g / sqrtf(fmaxf(variance, eps1_squared));
}

// One element's step: p ← p·decay, then p −= alpha · u / denom (the first moment m, when kept:
// m ← β1·m + (1−β1)·u/denom, and p −= alpha · m).
struct AdafactorStep {
  float alpha;  // the step size (optimizer.lr, or the relative step)
  float denom;  // max(1, RMS(u) / clip_threshold) of the element's tensor
  float decay;  // 1 − lr · weight_decay (1 where no decay applies)
  float beta1;  // 0: no first moment
};

STRATA_HOST_DEVICE inline void adafactor_apply(float& p, float* m, float u,
                                               const AdafactorStep& s) {
  p *= s.decay;
  const float clipped = u / s.denom;
  if (m == nullptr) {
    p -= s.alpha * clipped;
    return;
  }
  *m = s.beta1 * *m + (1.0f - s.beta1) * clipped;
  p -= s.alpha * *m;
}

}  // namespace strata
