#include "train/optimizer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace strata {

double learning_rate(const OptimizerConfig& o, int step, int total_steps) {
  if (step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  if (o.schedule == LrSchedule::constant) return o.lr;
  const int decay_steps = std::max(1, total_steps - 1 - o.warmup_steps);
  const double progress = std::clamp(double(step - o.warmup_steps) / decay_steps, 0.0, 1.0);
  const double shape = o.schedule == LrSchedule::linear
                           ? 1.0 - progress
                           : 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return o.min_lr + (o.lr - o.min_lr) * shape;
}

}  // namespace strata
