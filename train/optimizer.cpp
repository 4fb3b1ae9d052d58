#include "train/optimizer.h"

#include <cmath>

#include "model/kernels/cpu/adamw.h"

namespace strata {

AdamW::AdamW(const ParameterLayout& layout, const OptimizerConfig& config)
    : layout_(layout), config_(config), m_(layout.total(), 0.0f), v_(layout.total(), 0.0f) {}

void AdamW::step(float* params, const float* grads, double lr, double grad_scale) {
  ++steps_taken_;
  for (const TensorView& t : layout_.tensors()) {
    const cpu::AdamWHyper hyper{static_cast<float>(lr),
                                static_cast<float>(config_.beta1),
                                static_cast<float>(config_.beta2),
                                static_cast<float>(config_.eps),
                                t.decay ? static_cast<float>(config_.weight_decay) : 0.0f,
                                steps_taken_,
                                static_cast<float>(grad_scale)};
    cpu::adamw_update(params + t.offset, grads + t.offset, m_.data() + t.offset,
                      v_.data() + t.offset, static_cast<long>(t.size), hyper);
  }
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
  return max_norm / norm;
}

}  // namespace strata
