#include "parallel/diloco/robust_aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/core/error.h"

namespace strata {

namespace {

// The median of `values` (reordered), the mean of the middle two for an even count.
double median(std::vector<double>& values) {
  const std::size_t n = values.size(), mid = n / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (n % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

// Per coordinate: the mean of the sorted values [drop, n − drop), or the median when that is empty.
void trimmed(const std::vector<std::span<const float>>& members, int drop, std::span<float> out) {
  const std::size_t n = members.size();
  std::vector<double> column(n);
  for (std::size_t j = 0; j < out.size(); ++j) {
    for (std::size_t i = 0; i < n; ++i) column[i] = members[i][j];
    if (n <= 2 * static_cast<std::size_t>(drop)) {
      out[j] = static_cast<float>(median(column));
      continue;
    }
    std::sort(column.begin(), column.end());
    double sum = 0;
    for (std::size_t i = static_cast<std::size_t>(drop); i < n - drop; ++i) sum += column[i];
    out[j] = static_cast<float>(sum / static_cast<double>(n - 2 * drop));
  }
}

double distance_from(std::span<const float> x, const std::vector<double>& v) {
  double squares = 0;
  for (std::size_t j = 0; j < v.size(); ++j) {
    const double d = x[j] - v[j];
    squares += d * d;
  }
  return std::sqrt(squares);
}

void centered_clip(const std::vector<std::span<const float>>& members, const AggregationSettings& s,
                   std::span<float> out) {
  const std::size_t n = members.size(), size = out.size();
  trimmed(members, static_cast<int>(n), out);  // dropping n at each end: the median
  std::vector<double> v(out.begin(), out.end()), step(size), distance(n), weight(n);
  for (std::size_t i = 0; i < n; ++i) distance[i] = distance_from(members[i], v);
  std::vector<double> spread = distance;
  const double radius = s.clip_radius * median(spread);
  for (int iteration = 0; iteration < s.clip_iterations; ++iteration) {
    if (iteration > 0)
      for (std::size_t i = 0; i < n; ++i) distance[i] = distance_from(members[i], v);
    for (std::size_t i = 0; i < n; ++i)
      weight[i] = distance[i] > radius ? radius / distance[i] : 1.0;
    std::fill(step.begin(), step.end(), 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < size; ++j) step[j] += (members[i][j] - v[j]) * weight[i];
    for (std::size_t j = 0; j < size; ++j) v[j] += step[j] / static_cast<double>(n);
  }
  for (std::size_t j = 0; j < size; ++j) out[j] = static_cast<float>(v[j]);
}

}  // namespace

std::vector<MemberScreen> screen_norms(std::span<const double> norms, double norm_factor) {
  std::vector<MemberScreen> screens(norms.size());
  std::vector<double> finite_norms;
  for (std::size_t i = 0; i < norms.size(); ++i) {
    if (std::isfinite(norms[i])) {
      finite_norms.push_back(norms[i]);
      continue;
    }
    screens[i] = {false, "non-finite outer gradient"};
  }
  if (finite_norms.empty() || norm_factor <= 0) return screens;
  const double middle = median(finite_norms);
  if (middle <= 0) return screens;
  for (std::size_t i = 0; i < norms.size(); ++i) {
    if (!screens[i].kept || norms[i] <= norm_factor * middle) continue;
    char text[128];
    std::snprintf(text, sizeof text, "norm %.4g > %g × median %.4g", norms[i], norm_factor, middle);
    screens[i] = {false, text};
  }
  return screens;
}

void aggregate(const std::vector<std::span<const float>>& members,
               const AggregationSettings& settings, std::span<float> out) {
  STRATA_CHECK(!members.empty(), "an aggregation of no member");
  for (const std::span<const float>& m : members)
    STRATA_CHECK(m.size() == out.size(), "a member of ", m.size(), " values, not ", out.size());
  switch (settings.rule) {
    case AggregationRule::mean: {
      for (std::size_t j = 0; j < out.size(); ++j) {
        double sum = 0;
        for (const std::span<const float>& m : members) sum += m[j];
        out[j] = static_cast<float>(sum / static_cast<double>(members.size()));
      }
      return;
    }
    case AggregationRule::trimmed_mean:
      trimmed(members, settings.trim, out);
      return;
    case AggregationRule::centered_clip:
      centered_clip(members, settings, out);
      return;
  }
}

}  // namespace strata
