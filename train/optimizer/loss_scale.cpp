#include "train/optimizer/loss_scale.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "model/core/error.h"

namespace strata {

LossScaler LossScaler::for_config(const PrecisionConfig& precision) {
  if (precision.compute != cpu::ComputeDtype::fp16)
    return LossScaler(1.0, false, precision.loss_scale_window);
  if (precision.loss_scale == "dynamic") {
    // Validated when the config was read: within [kMinScale, kMaxScale].
    return LossScaler(precision.initial_loss_scale, true, precision.loss_scale_window);
  }
  // Validated when the config was read: a positive number (parsed the same locale-free way).
  double fixed = 0;
  const std::string& text = precision.loss_scale;
  std::from_chars(text.data() + (text.starts_with('+') ? 1 : 0), text.data() + text.size(), fixed);
  return LossScaler(fixed, false, precision.loss_scale_window);
}

void LossScaler::update(bool gradients_finite) {
  if (!dynamic_) return;
  if (!gradients_finite) {
    scale_ = std::max(scale_ / 2, kMinScale);
    clean_steps_ = 0;
    return;
  }
  if (++clean_steps_ >= window_) {
    scale_ = std::min(scale_ * 2, kMaxScale);
    clean_steps_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t clean_steps) {
  if (!dynamic_ || clean_steps < 0) return;
  if (!(std::isfinite(scale) && scale > 0))
    fail("checkpoint: /state loss_scale is ", scale, ", not a positive number");
  scale_ = std::clamp(scale, kMinScale, kMaxScale);
  clean_steps_ = clean_steps;
}

}  // namespace strata
