// DiLoCo's outer optimizer (Douillard et al., arXiv 2311.08105, Algorithm 1) over an element range
// of the flat parameter buffer, like the inner optimizers (train/optimizer/optimizer.h): it holds
// the anchor θ (fp32, where every worker's period started) and the outer momentum for that range
// only.
//
// One outer step, given θ̄ (the mean over workers of their parameters after the period's inner
// steps, or anchor − the mean outer gradient when outer gradients travel compressed):
//   Δ  = θ − θ̄                      the outer gradient (mean over workers of θ − θ_i)
//   m ← μ·m + Δ
//   u  = Δ + μ·m  (Nesterov)   or   m  (plain momentum)
//   θ ← θ − lr·u
// computed as θ ← θ̄ + ((1 − lr)·Δ − lr·μ·m) with Nesterov (θ̄ + ((1 − lr)·Δ − lr·(m − Δ)) without),
// the same value in exact arithmetic, so that the special cases hold exactly in floating point:
// lr 1 and momentum 0 give θ ← θ̄ (one worker: plain training; several: federated averaging)
// bit for bit, where θ − (θ − θ̄) would round.
#pragma once

#include <cstddef>
#include <vector>

#include "model/core/element_range.h"

namespace strata {

struct OuterOptimizerConfig {
  double lr = 0.7;
  double momentum = 0.9;
  bool nesterov = true;
};

class OuterOptimizer {
 public:
  OuterOptimizer(ElementRange range, const OuterOptimizerConfig& config);

  ElementRange range() const { return range_; }
  // The anchor := params (the range's values): the start of training or of a resumed period.
  void set_anchor(const float* params) { set_anchor(range_, params); }
  // One outer step from `mean` (θ̄ over the range); the new anchor is written to `params` too.
  void step(const float* mean, float* params) { step(range_, mean, params); }
  // The same on `part` of the range (a streaming fragment): params and mean hold part's values.
  void set_anchor(ElementRange part, const float* params);
  void step(ElementRange part, const float* mean, float* params);

  std::vector<float>& anchor() { return anchor_; }      // checkpoints
  std::vector<float>& momentum() { return momentum_; }  // checkpoints
  const std::vector<float>& anchor() const { return anchor_; }
  const std::vector<float>& momentum() const { return momentum_; }

 private:
  ElementRange range_;
  OuterOptimizerConfig config_;
  std::vector<float> anchor_, momentum_;
};

}  // namespace strata
