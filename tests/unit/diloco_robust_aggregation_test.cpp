// Robust averaging of outer gradients (parallel/diloco/robust_aggregation.h): screening names a
// non-finite member and one far above the median norm; trimmed_mean drops each coordinate's
// extremes; with one of four members scaled by 1e3, centered_clip and trimmed_mean stay near the
// honest members' mean and mean does not.
#include "parallel/diloco/robust_aggregation.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

std::vector<std::span<const float>> spans(const std::vector<std::vector<float>>& members) {
  return {members.begin(), members.end()};
}

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  double squares = 0;
  for (std::size_t i = 0; i < a.size(); ++i) squares += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(squares);
}

// Three honest members around a common gradient, and a fourth.
std::vector<std::vector<float>> members_with(float scale) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> common(1000);
  for (float& x : common) x = normal(rng);
  std::vector<std::vector<float>> members(4, common);
  for (auto& m : members)
    for (float& x : m) x += 0.1f * normal(rng);
  for (float& x : members[3]) x *= scale;
  return members;
}

std::vector<float> honest_mean(const std::vector<std::vector<float>>& members) {
  std::vector<float> mean(members[0].size());
  for (std::size_t j = 0; j < mean.size(); ++j)
    mean[j] = (members[0][j] + members[1][j] + members[2][j]) / 3;
  return mean;
}

double norm(const std::vector<float>& x) {
  double squares = 0;
  for (const float v : x) squares += static_cast<double>(v) * v;
  return std::sqrt(squares);
}

TEST(RobustAggregation, ScreeningNamesWhoIsLeftOutAndWhy) {
  const std::vector<std::vector<float>> members = members_with(1e3f);
  std::vector<double> norms;
  for (const auto& m : members) norms.push_back(norm(m));
  norms[1] = std::numeric_limits<double>::quiet_NaN();
  const std::vector<MemberScreen> screens = screen_norms(norms, 10);
  EXPECT_TRUE(screens[0].kept);
  EXPECT_TRUE(screens[2].kept);
  EXPECT_FALSE(screens[1].kept);
  EXPECT_EQ(screens[1].why, "non-finite outer gradient");
  EXPECT_FALSE(screens[3].kept);
  EXPECT_NE(screens[3].why.find("× median"), std::string::npos) << screens[3].why;
  // A factor of 0 screens non-finite norms only; honest members all pass; a median of 0 leaves
  // out no finite norm.
  const std::vector<MemberScreen> unscreened = screen_norms(norms, 0);
  EXPECT_TRUE(unscreened[3].kept);
  EXPECT_FALSE(unscreened[1].kept);
  for (const MemberScreen& s : screen_norms(std::vector<double>{1.0, 1.5, 0.8, 2.0}, 10))
    EXPECT_TRUE(s.kept);
  for (const MemberScreen& s : screen_norms(std::vector<double>{0.0, 0.0, 0.0, 2.0}, 10))
    EXPECT_TRUE(s.kept);
}

TEST(RobustAggregation, TrimmedMeanDropsEachCoordinatesExtremes) {
  const std::vector<std::vector<float>> members{{1, 10}, {2, -50}, {3, 20}, {100, 30}};
  std::vector<float> out(2);
  aggregate(spans(members), {AggregationRule::trimmed_mean, 1}, out);
  EXPECT_EQ(out, (std::vector<float>{2.5f, 15.0f}));
  // Dropping as many as there are: the median.
  aggregate(spans(members), {AggregationRule::trimmed_mean, 2}, out);
  EXPECT_EQ(out, (std::vector<float>{2.5f, 15.0f}));
  aggregate(spans(members), {AggregationRule::mean}, out);
  EXPECT_EQ(out, (std::vector<float>{26.5f, 2.5f}));
}

TEST(RobustAggregation, OneScaledMemberMovesTheMeanButNotTheRobustRules) {
  const std::vector<std::vector<float>> members = members_with(1e3f);
  const std::vector<float> honest = honest_mean(members);
  double honest_norm = 0;
  for (const float x : honest) honest_norm += x * x;
  honest_norm = std::sqrt(honest_norm);
  std::vector<float> out(honest.size());
  aggregate(spans(members), {AggregationRule::mean}, out);
  EXPECT_GT(distance(out, honest), 100 * honest_norm);
  aggregate(spans(members), {AggregationRule::trimmed_mean, 1}, out);
  EXPECT_LT(distance(out, honest), 0.1 * honest_norm);
  aggregate(spans(members), {AggregationRule::centered_clip, 1, 1.0, 20}, out);
  EXPECT_LT(distance(out, honest), 0.1 * honest_norm);
  // The radius is relative to the members' spread: the same result with every member scaled.
  std::vector<std::vector<float>> scaled = members;
  for (auto& m : scaled)
    for (float& x : m) x *= 1024;
  std::vector<float> scaled_out(out.size());
  aggregate(spans(scaled), {AggregationRule::centered_clip, 1, 1.0, 20}, scaled_out);
  for (std::size_t j = 0; j < out.size(); ++j)
    EXPECT_NEAR(scaled_out[j], out[j] * 1024, 1e-3 * std::abs(out[j] * 1024) + 1e-3);
  // Honest members alone: CenteredClip with a radius past their spread is their mean.
  const std::vector<std::vector<float>> three(members.begin(), members.begin() + 3);
  aggregate(spans(three), {AggregationRule::centered_clip, 1, 100.0, 20}, out);
  EXPECT_LT(distance(out, honest), 1e-4 * honest_norm);
}

// Members of different thread counts compute the same bits (a worker's `threads` is its own).
TEST(RobustAggregation, ResultsDoNotDependOnTheThreadCount) {
  std::vector<std::vector<float>> members = members_with(1e3f);
  for (auto& m : members) m.resize(3 * 4096 + 17, 0.5f);  // several blocks, a partial last one
  for (AggregationRule rule : {AggregationRule::trimmed_mean, AggregationRule::centered_clip}) {
    std::vector<float> one(members[0].size()), three(one.size());
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    aggregate(spans(members), {rule, 1, 1.0, 20}, one);
    omp_set_num_threads(3);
    aggregate(spans(members), {rule, 1, 1.0, 20}, three);
    omp_set_num_threads(threads);
    EXPECT_EQ(one, three) << static_cast<int>(rule);
  }
}

}  // namespace
}  // namespace strata
