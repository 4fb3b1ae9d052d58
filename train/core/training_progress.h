// Where a run stands, which the loop, its one training step (train/training_step.h) and DiLoCo's
// outer loops (train/diloco/) all advance or read: restored from and saved in checkpoints.
#pragma once

#include <cstdint>

namespace strata {

struct TrainingProgress {
  std::int64_t step = 0;             // steps completed (skipped ones included)
  std::int64_t data_position = 0;    // global index of the next training sample
  std::int64_t optimizer_steps = 0;  // updates applied: AdamW's bias-correction count
  int consecutive_nonfinite = 0;     // non-finite steps in a row (not fp16 overflows)
};

}  // namespace strata
