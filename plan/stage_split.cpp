#include "plan/stage_split.h"

#include <limits>

#include "model/core/error.h"

namespace strata {

std::optional<StageSplit> split_stages(int n_layers, int stages, const StageCostModel& costs) {
  STRATA_CHECK(n_layers >= 1 && stages >= 1);
  if (stages > n_layers) return std::nullopt;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  const std::size_t columns = static_cast<std::size_t>(n_layers) + 1;
  // best[k][j]: the smallest slowest-stage time placing layers [0, j) on stages [0, k);
  // cut[k][j]: where stage k−1 begins in that split.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                        std::vector<double>(columns, kNone));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(columns, -1));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    // Stage k−1 needs a layer, and every later stage one of its own.
    for (int j = k; j <= n_layers - (stages - k); ++j) {
      for (int i = k - 1; i < j; ++i) {
        const double before = best[k - 1][static_cast<std::size_t>(i)];
        if (before == kNone || !costs.fits(k - 1, i, j)) continue;
        const double slowest = std::max(before, costs.time(k - 1, i, j));
        if (slowest < best[k][static_cast<std::size_t>(j)]) {  // strict: the earliest cut wins ties
          best[k][static_cast<std::size_t>(j)] = slowest;
          cut[k][static_cast<std::size_t>(j)] = i;
        }
      }
    }
  }
  const double optimum = best[static_cast<std::size_t>(stages)][static_cast<std::size_t>(n_layers)];
  if (optimum == kNone) return std::nullopt;
  StageSplit split;
  split.slowest_stage = optimum;
  split.layers.assign(static_cast<std::size_t>(stages), 0);
  for (int k = stages, j = n_layers; k >= 1; --k) {
    const int i = cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)];
    split.layers[static_cast<std::size_t>(k - 1)] = j - i;
    j = i;
  }
  return split;
}

}  // namespace strata
