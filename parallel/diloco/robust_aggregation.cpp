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

// Coordinates are independent, so the loops over them run on OpenMP's threads; sums across
// coordinates are taken over fixed blocks of kBlock, then the blocks in order, so every member
// computes the same bits whatever its thread count.
constexpr std::size_t kBlock = 4096;

// Per coordinate: the mean of the sorted values [drop, n − drop), or the median when that is empty.
void trimmed(const std::vector<std::span<const float>>& members, int drop, std::span<float> out) {
  const std::size_t n = members.size(), size = out.size();
  const auto kept = static_cast<std::size_t>(drop);
#pragma omp parallel
  {
    std::vector<double> column(n);
#pragma omp for schedule(static)
    for (std::size_t j = 0; j < size; ++j) {
      for (std::size_t i = 0; i < n; ++i) column[i] = members[i][j];
      if (n <= 2 * kept) {
        out[j] = static_cast<float>(median(column));
        continue;
      }
      std::sort(column.begin(), column.end());
      double sum = 0;
      for (std::size_t i = kept; i < n - kept; ++i) sum += column[i];
      out[j] = static_cast<float>(sum / static_cast<double>(n - 2 * kept));
    }
  }
}

// ‖x_i − v‖ for every member i.
std::vector<double> distances_from(const std::vector<std::span<const float>>& members,
                                   const std::vector<double>& v) {
  const std::size_t n = members.size(), size = v.size(), blocks = (size + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks * n, 0.0);
#pragma omp parallel for schedule(static)
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t i = 0; i < n; ++i) {
      double squares = 0;
      for (std::size_t j = b * kBlock; j < std::min(size, (b + 1) * kBlock); ++j) {
        const double d = members[i][j] - v[j];
        squares += d * d;
      }
      partial[b * n + i] = squares;
    }
  std::vector<double> distance(n, 0.0);
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t i = 0; i < n; ++i) distance[i] += partial[b * n + i];
  for (double& d : distance) d = std::sqrt(d);
  return distance;
}

void centered_clip(const std::vector<std::span<const float>>& members, const AggregationSettings& s,
                   std::span<float> out) {
  const std::size_t n = members.size(), size = out.size();
  trimmed(members, static_cast<int>(n), out);  // dropping n at each end: the median
  std::vector<double> v(out.begin(), out.end()), weight(n);
  std::vector<double> spread = distances_from(members, v);
  const double radius = s.clip_radius * median(spread);
  for (int iteration = 0; iteration < s.clip_iterations; ++iteration) {
    const std::vector<double> distance = distances_from(members, v);
    for (std::size_t i = 0; i < n; ++i)
      weight[i] = distance[i] > radius ? radius / distance[i] : 1.0;
#pragma omp parallel for schedule(static)
    for (std::size_t j = 0; j < size; ++j) {
      double step = 0;
      for (std::size_t i = 0; i < n; ++i) step += (members[i][j] - v[j]) * weight[i];
      v[j] += step / static_cast<double>(n);
    }
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
