// Learning rate at an optimizer step: linear warm-up from lr/warmup to lr over warmup_steps, then
// `cosine` (half cosine to min_lr at the last step), `linear` (straight to min_lr) or `constant`.
#pragma once

#include "plan/config.h"

namespace strata {

// step is 0-based (the update about to be applied); total_steps = train.steps.
double learning_rate(const OptimizerConfig& optimizer, int step, int total_steps);

}  // namespace strata
