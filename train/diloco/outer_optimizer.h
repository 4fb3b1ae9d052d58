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
//
// Scaled (diloco.outer_schedule: inner; docs/ARCHITECTURE.md §2 "DiLoCo"): a step at scale
// s ∈ [0, 1] uses lr_s = 1 − (1 − lr)·s and μ_s = μ·s, so s = 1 is the configured step and s = 0
// plain averaging (θ ← θ̄): what the outer step adds beyond the workers' mean, the extrapolation
// along Δ and the momentum, shrinks with s. The caller passes the inner learning rate over its
// peak, so the extrapolation warms up and anneals with the inner schedule: a momentum of 0.9
// kept at full strength while the inner steps anneal keeps moving the anchor by the large outer
// gradients of earlier periods (docs/PERFORMANCE.md, DiLoCo from a warm start).
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
  // One outer step from `mean` (θ̄ over the range) at `scale` (see the header); the new anchor is
  // written to `params` too.
  void step(const float* mean, float* params, double scale = 1) {
    step(range_, mean, params, scale);
  }
  // The same on `part` of the range (a streaming fragment): params and mean hold part's values.
  void set_anchor(ElementRange part, const float* params);
  void step(ElementRange part, const float* mean, float* params, double scale = 1);

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
