#include "train/diloco/outer_optimizer.h"

#include <algorithm>

#include "model/core/error.h"

namespace strata {

OuterOptimizer::OuterOptimizer(ElementRange range, const OuterOptimizerConfig& config)
    : range_(range), config_(config), anchor_(range.size(), 0.0f), momentum_(range.size(), 0.0f) {}

namespace {
std::size_t offset_in(ElementRange range, ElementRange part) {
  STRATA_CHECK(part.begin >= range.begin && part.end <= range.end, "outer optimizer: part [",
               part.begin, ", ", part.end, ") outside its range [", range.begin, ", ", range.end,
               ")");
  return part.begin - range.begin;
}
}  // namespace

void OuterOptimizer::set_anchor(ElementRange part, const float* params) {
  std::copy_n(params, part.size(), anchor_.begin() + offset_in(range_, part));
}

void OuterOptimizer::step(ElementRange part, const float* mean, float* params, double scale) {
  STRATA_CHECK(scale >= 0 && scale <= 1, "outer optimizer: scale ", scale, " outside [0, 1]");
  // scale 1 uses the configured values as they are (1 − (1 − lr) may round).
  const float lr = static_cast<float>(scale == 1 ? config_.lr : 1 - (1 - config_.lr) * scale);
  const float mu = static_cast<float>(config_.momentum * scale);
  const std::size_t at = offset_in(range_, part);
  float* anchor = anchor_.data() + at;
  float* momentum = momentum_.data() + at;
  for (std::size_t i = 0; i < part.size(); ++i) {
    const float delta = anchor[i] - mean[i];
    const float m = mu * momentum[i] + delta;
    momentum[i] = m;
    // θ − lr·u with u = Δ + μ·m (Nesterov) or m, written around θ̄ (see the header).
    const float correction =
        config_.nesterov ? (1 - lr) * delta - lr * mu * m : (1 - lr) * delta - lr * (m - delta);
    anchor[i] = correction == 0 ? mean[i] : mean[i] + correction;  // keeps a −0 mean −0
    params[i] = anchor[i];
  }
}

}  // namespace strata
