// The planner's inter-operator pass (Alpa's, on Strata's fixed layer chain): which consecutive
// layers form each pipeline stage, so that the slowest stage is as fast as possible while every
// stage fits its memory limit. Dynamic programming over (stages used, layers placed):
//   best[k][j] = min over i < j of max(best[k−1][i], time(k−1, i, j)), over splits whose stage
//   k−1 (layers i … j−1) fits: memory(k−1, i, j) <= limit.
// A stage's cost may depend on its position (the first holds the embedding, the last the head,
// and under 1F1B early stages hold more micro-batches' activations), so the costs are functions
// of (stage, first layer, end layer). O(pp · n²) calls each.
#pragma once

#include <functional>
#include <optional>
#include <vector>

namespace strata {

struct StageCostModel {
  // Seconds of one step on stage `stage` holding layers [begin, end).
  std::function<double(int stage, int begin, int end)> time;
  // Whether that stage fits its device's memory.
  std::function<bool(int stage, int begin, int end)> fits;
};

struct StageSplit {
  std::vector<int> layers;  // per stage, each >= 1, summing to the layer count (parallel.pp_layers)
  double slowest_stage = 0;  // the objective: the largest stage time
};

// The split of `n_layers` layers over `stages` stages (each holding at least one layer) with the
// smallest slowest-stage time among those whose every stage fits; nullopt when none fits (or
// stages > n_layers). Among equal optima, the one that puts layers on earlier stages first.
std::optional<StageSplit> split_stages(int n_layers, int stages, const StageCostModel& costs);

}  // namespace strata
