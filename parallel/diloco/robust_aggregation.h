// Averaging that one faulty or malicious member cannot move far (docs/ARCHITECTURE.md §2
// "Elastic DiLoCo"): which members' outer gradients enter an averaging, and how they are
// combined when they cannot simply be summed. Pure functions of the members' vectors, the same on
// every member that holds them all.
//
// Screening, always: a member whose vector holds a non-finite value, or whose L2 norm is above
// `norm_factor` times the median of the members' norms, is left out, with the reason named (an
// honest member's outer gradient is within a small factor of the others'; a flipped exponent bit or
// a gradient scaled by 1e6 is not). The median of an even count is the mean of the middle two.
//
// Rules over the members kept (n of them):
//   mean           Σ x_i / n
//   trimmed_mean   per coordinate, the mean of the values left after the `trim` lowest and the
//                  `trim` highest are dropped; with n ≤ 2·trim, the coordinate's median
//   centered_clip  CenteredClip (Karimireddy, He and Jaggi, 2021; hivemind's robust averaging):
//                  from v_0 = the coordinate-wise median, `clip_iterations` times
//                    v ← v + (1/n) Σ_i (x_i − v) · min(1, clip_radius / ‖x_i − v‖)
//                  so each member moves the result by at most clip_radius / n per iteration,
//                  however far it lies. (hivemind starts from the mean; the median start keeps a
//                  far outlier from dragging v_0 away, which the clipped steps then take many
//                  iterations to undo.)
// Sums run in double, members in their given order, so a result depends on the order only through
// rounding; callers pass the members in slot order on every member.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace strata {

struct MemberScreen {
  bool kept = true;
  double norm = 0;  // the L2 norm (NaN or inf when non-finite)
  std::string why;  // when left out: "non-finite values", "norm N > F × median M"
};
std::vector<MemberScreen> screen_members(const std::vector<std::span<const float>>& members,
                                         double norm_factor);

enum class AggregationRule { mean, trimmed_mean, centered_clip };

struct AggregationSettings {
  AggregationRule rule = AggregationRule::mean;
  int trim = 1;              // trimmed_mean: values dropped at each end of every coordinate
  double clip_radius = 1.0;  // centered_clip: τ
  int clip_iterations = 20;  // centered_clip: L
};

// out = the rule applied to `members` (each of out.size() values; at least one member).
void aggregate(const std::vector<std::span<const float>>& members,
               const AggregationSettings& settings, std::span<float> out);

}  // namespace strata
