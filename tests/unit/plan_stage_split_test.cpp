// The dynamic-programming stage split (plan/stage_split.h) against brute force over every split,
// on random layer costs with position-dependent extras and memory limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "plan/stage_split.h"

namespace strata {
namespace {

// Every composition of n into k positive parts.
void for_each_split(int n, int k, std::vector<int>& parts,
                    const std::function<void(const std::vector<int>&)>& visit) {
  if (k == 1) {
    parts.push_back(n);
    visit(parts);
    parts.pop_back();
    return;
  }
  for (int first = 1; first <= n - (k - 1); ++first) {
    parts.push_back(first);
    for_each_split(n - first, k - 1, parts, visit);
    parts.pop_back();
  }
}

struct RandomModel {
  std::vector<double> layer_time, layer_memory;
  double first_time, last_time, first_memory, last_memory, limit;
  StageCostModel costs() const {
    StageCostModel c;
    c.time = [this](int stage, int begin, int end) {
      double t = 0;
      for (int l = begin; l < end; ++l) t += layer_time[static_cast<std::size_t>(l)];
      if (stage == 0) t += first_time;
      if (end == static_cast<int>(layer_time.size())) t += last_time;
      return t;
    };
    c.fits = [this](int stage, int begin, int end) {
      double m = 0;
      for (int l = begin; l < end; ++l) m += layer_memory[static_cast<std::size_t>(l)];
      // Earlier stages hold more micro-batches' activations under 1F1B.
      m *= 1.0 + 0.5 / (1 + stage);
      if (stage == 0) m += first_memory;
      if (end == static_cast<int>(layer_memory.size())) m += last_memory;
      return m <= limit;
    };
    return c;
  }
};

TEST(StageSplit, EqualsBruteForceOnRandomCases) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unit(0.5, 2.0);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9), stages = 1 + static_cast<int>(rng() % 5);
    RandomModel model;
    for (int l = 0; l < n; ++l) {
      model.layer_time.push_back(unit(rng));
      model.layer_memory.push_back(unit(rng));
    }
    model.first_time = 2 * unit(rng);
    model.last_time = 3 * unit(rng);
    model.first_memory = unit(rng);
    model.last_memory = 2 * unit(rng);
    model.limit = 1.0 + 8 * unit(rng) * n / std::max(stages, 1) / 2;
    const StageCostModel costs = model.costs();

    double brute = std::numeric_limits<double>::infinity();
    if (stages <= n) {
      std::vector<int> parts;
      for_each_split(n, stages, parts, [&](const std::vector<int>& split) {
        double slowest = 0;
        bool fits = true;
        for (int s = 0, begin = 0; s < stages; begin += split[static_cast<std::size_t>(s)], ++s) {
          const int end = begin + split[static_cast<std::size_t>(s)];
          fits = fits && costs.fits(s, begin, end);
          slowest = std::max(slowest, costs.time(s, begin, end));
        }
        if (fits) brute = std::min(brute, slowest);
      });
    }
    const auto split = split_stages(n, stages, costs);
    if (brute == std::numeric_limits<double>::infinity()) {
      EXPECT_FALSE(split.has_value()) << "trial " << trial;
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(split.has_value()) << "trial " << trial;
    ++feasible;
    EXPECT_DOUBLE_EQ(split->slowest_stage, brute) << "trial " << trial;
    // The split itself achieves what it claims, fits, and covers every layer once.
    ASSERT_EQ(split->layers.size(), static_cast<std::size_t>(stages));
    double slowest = 0;
    int begin = 0;
    for (int s = 0; s < stages; ++s) {
      const int end = begin + split->layers[static_cast<std::size_t>(s)];
      EXPECT_GE(split->layers[static_cast<std::size_t>(s)], 1);
      EXPECT_TRUE(costs.fits(s, begin, end));
      slowest = std::max(slowest, costs.time(s, begin, end));
      begin = end;
    }
    EXPECT_EQ(begin, n);
    EXPECT_DOUBLE_EQ(slowest, split->slowest_stage);
  }
  // The random limits produce both kinds of case.
  EXPECT_GT(feasible, 50);
  EXPECT_GT(infeasible, 10);
}

TEST(StageSplit, BalancesEqualLayersAndTiesGoToEarlierStages) {
  StageCostModel costs;
  costs.time = [](int, int begin, int end) { return double(end - begin); };
  costs.fits = [](int, int, int) { return true; };
  EXPECT_EQ(split_stages(8, 4, costs)->layers, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(split_stages(7, 3, costs)->slowest_stage, 3);
  EXPECT_FALSE(split_stages(2, 3, costs).has_value());
}

}  // namespace
}  // namespace strata
