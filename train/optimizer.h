// AdamW over the flat parameter buffer with fp32 moments in the same layout. Weight decay applies
// to tensors the layout marks `decay` (2-D weights); gradient clipping scales by
// grad_clip / ‖g‖ when the global norm exceeds grad_clip.
#pragma once

#include <vector>

#include "model/parameter_layout.h"
#include "train/config.h"

namespace strata {

class AdamW {
 public:
  AdamW(const ParameterLayout& layout, const OptimizerConfig& config);

  // Applies one update with learning rate lr; grad_scale multiplies the gradients first
  // (clipping). Increments the step count used for bias correction.
  void step(float* params, const float* grads, double lr, double grad_scale);

  int steps_taken() const { return steps_taken_; }
  void set_steps_taken(int steps) { steps_taken_ = steps; }
  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }
  const std::vector<float>& first_moment() const { return m_; }
  const std::vector<float>& second_moment() const { return v_; }

 private:
  const ParameterLayout& layout_;
  OptimizerConfig config_;
  std::vector<float> m_, v_;
  int steps_taken_ = 0;
};

// Factor that clips a gradient of global norm `norm` to `max_norm` (1 when below or disabled).
double clip_factor(double norm, double max_norm);

}  // namespace strata
