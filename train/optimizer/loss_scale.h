// Loss scaling for fp16 (docs/ARCHITECTURE.md §6). fp16 flushes gradients below 2^-24 to zero, so
// the backward pass starts from scale · loss and the optimizer divides the scale out again (before
// clipping). A dynamic scale adapts: a step whose gradients overflow (inf/NaN in the global norm,
// which every rank computes alike) is skipped and the scale halves; after `window` clean steps in a
// row it doubles. bf16 and fp32 have fp32's exponent range and need no scaling: their scale is 1.
#pragma once

#include <cstdint>

#include "plan/config.h"

namespace strata {

class LossScaler {
 public:
  // A dynamic scale stays within [kMinScale, kMaxScale] (precision.initial_loss_scale is checked
  // against the same bounds): below 1 it would only shrink gradients further, and 2^32 lifts
  // gradients far below fp16's smallest subnormal into its range.
  static constexpr double kMinScale = 1.0;
  static constexpr double kMaxScale = 4294967296.0;  // 2^32

  // fp16: `precision.loss_scale` (dynamic from `initial_loss_scale`, or fixed); otherwise 1.
  static LossScaler for_config(const PrecisionConfig& precision);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Consecutive clean steps since the scale last changed (saved so resume is exact).
  std::int64_t clean_steps() const { return clean_steps_; }

  // Whether an overflow at the current scale is worth retrying at a smaller one: a dynamic scale
  // above its minimum. Otherwise a non-finite step is a divergence, not a scaling problem.
  bool can_back_off() const { return dynamic_ && scale_ > kMinScale; }

  // Records a step's outcome: an overflow halves a dynamic scale, a clean step counts towards
  // doubling it. A fixed scale never changes.
  void update(bool gradients_finite);

  // Continues from the state a checkpoint saved. Only a dynamic scale restores, and only from a
  // run that had one (clean_steps >= 0); otherwise the config's scale stands.
  void restore(double scale, std::int64_t clean_steps);

 private:
  LossScaler(double scale, bool dynamic, int window)
      : scale_(scale), dynamic_(dynamic), window_(window) {}

  double scale_;
  bool dynamic_;
  int window_;
  std::int64_t clean_steps_ = 0;
};

}  // namespace strata
