// Averaging that one faulty or malicious member cannot move far (docs/ARCHITECTURE.md §2
// "Robust averaging"): which members' outer gradients enter an averaging, and how they are
// combined when they cannot simply be summed. Pure functions, the same on every member that holds
// the same inputs (parallel/diloco/worker_averaging.h runs them over a group).
//
// Screening (diloco.outlier_factor F), before every averaging: a member whose outer gradient holds
// a non-finite value (its norm is then NaN or inf), or whose L2 norm is above F times the median of
// the members' finite norms, is left out, with the reason named. An honest member's outer gradient
// is within a small factor of the others'; a flipped exponent bit or a gradient scaled by 1e3 is
// not. The median of an even count is the mean of the middle two; F ≤ 0 screens non-finite norms
// only, and a median of 0 leaves out no finite norm.
//
// Rules over the members kept (n of them) (diloco.aggregation):
//   mean           Σ x_i / n
//   trimmed_mean   per coordinate, the mean of the values left after the `trim` lowest and the
//                  `trim` highest are dropped; with n ≤ 2·trim, the coordinate's median
//   centered_clip  CenteredClip (Karimireddy, He and Jaggi, 2021; hivemind's robust averaging):
//                  from v_0 = the coordinate-wise median, `clip_iterations` times
//                    v ← v + (1/n) Σ_i (x_i − v) · min(1, τ / ‖x_i − v‖)
//                  so each member moves the result by at most τ / n per iteration, however far it
//                  lies. τ = clip_radius × the median over members of ‖x_i − v_0‖: a radius in
//                  units of the members' own spread, so one setting suits any model and period
//                  (hivemind's τ is absolute). hivemind starts from the mean; the median start
//                  keeps a far outlier from dragging v_0 away, which the clipped steps would then
//                  take many iterations to undo.
// Sums run in double, members in their given order; callers pass the members in the same order
// on every member, so every member computes the same bits.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "model/core/choice.h"

namespace strata {

struct MemberScreen {
  bool kept = true;
  std::string why;  // when left out: "non-finite outer gradient", "norm N > F × median M"
};
// One screen per norm, in order.
std::vector<MemberScreen> screen_norms(std::span<const double> norms, double norm_factor);

enum class AggregationRule { mean, trimmed_mean, centered_clip };
inline constexpr Choices kAggregationChoices{
    std::array{ChoiceWord{AggregationRule::mean, "mean"},
               ChoiceWord{AggregationRule::trimmed_mean, "trimmed_mean"},
               ChoiceWord{AggregationRule::centered_clip, "centered_clip"}}};

struct AggregationSettings {
  AggregationRule rule = AggregationRule::mean;
  int trim = 1;              // trimmed_mean: values dropped at each end of every coordinate
  double clip_radius = 1.0;  // centered_clip: τ in units of the members' median distance from v_0
  int clip_iterations = 20;  // centered_clip: L

  bool operator==(const AggregationSettings&) const = default;
};

// out = the rule applied to `members` (each of out.size() values; at least one member).
void aggregate(const std::vector<std::span<const float>>& members,
               const AggregationSettings& settings, std::span<float> out);

}  // namespace strata
