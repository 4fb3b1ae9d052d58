#include "train/optimizer/optimizer.h"

#include <cmath>

#include "model/kernels/cpu/adamw.h"
#include "train/optimizer/adafactor.h"

namespace strata {

AdamW::AdamW(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config)
    : range_(range),
      config_(config),
      decayed_(restrict_to(layout.decayed_ranges(), range)),
      m_(range.size(), 0.0f),
      v_(range.size(), 0.0f) {}

void AdamW::update(float* params, const float* grads, const OptimizerStep& step) {
  cpu::AdamWHyper hyper{static_cast<float>(step.lr),
                        static_cast<float>(config_.beta1),
                        static_cast<float>(config_.beta2),
                        static_cast<float>(config_.eps),
                        0.0f,
                        step.count,
                        static_cast<float>(step.grad_scale)};
  // Alternate runs without and with decay, in element order.
  auto run = [&](std::size_t begin, std::size_t end, float decay) {
    if (end <= begin) return;
    hyper.weight_decay = decay;
    cpu::adamw_update(params + begin, grads + begin, m_.data() + begin, v_.data() + begin,
                      static_cast<long>(end - begin), hyper);
  };
  std::size_t next = 0;
  for (const ElementRange& r : decayed_) {
    run(next, r.begin, 0.0f);
    run(r.begin, r.end, static_cast<float>(config_.weight_decay));
    next = r.end;
  }
  run(next, range_.size(), 0.0f);
}

std::unique_ptr<Optimizer> make_optimizer(const ParameterLayout& layout, ElementRange range,
                                          const OptimizerConfig& config, OptimizerGroups groups) {
  switch (config.name) {
    case OptimizerName::adamw:
      return std::make_unique<AdamW>(layout, range, config);
    case OptimizerName::adafactor:
      return std::make_unique<Adafactor>(layout, range, config, groups);
  }
  return nullptr;
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
  return max_norm / norm;
}

}  // namespace strata
