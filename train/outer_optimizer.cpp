#include "train/outer_optimizer.h"

#include <algorithm>

namespace strata {

OuterOptimizer::OuterOptimizer(ElementRange range, const OuterOptimizerConfig& config)
    : range_(range), config_(config), anchor_(range.size(), 0.0f), momentum_(range.size(), 0.0f) {}

void OuterOptimizer::set_anchor(const float* params) {
  std::copy_n(params, anchor_.size(), anchor_.begin());
}

void OuterOptimizer::step(const float* mean, float* params) {
  const float lr = static_cast<float>(config_.lr), mu = static_cast<float>(config_.momentum);
  for (std::size_t i = 0; i < anchor_.size(); ++i) {
    const float delta = anchor_[i] - mean[i];
    const float m = mu * momentum_[i] + delta;
    momentum_[i] = m;
    // θ − lr·u with u = Δ + μ·m (Nesterov) or m, written around θ̄ (see the header).
    const float correction =
        config_.nesterov ? (1 - lr) * delta - lr * mu * m : (1 - lr) * delta - lr * (m - delta);
    anchor_[i] = correction == 0 ? mean[i] : mean[i] + correction;  // keeps a −0 mean −0
    params[i] = anchor_[i];
  }
}

}  // namespace strata
