// Gradient checks against central finite differences in double precision: a backward pass's
// analytic gradient against (L(x + h) − L(x − h)) / 2h, element by element, for a scalar loss L
// (typically Σ probe ⊙ forward(x) with a fixed random probe, so dL/dout = probe).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace strata::testing {

using Vec = std::vector<double>;

inline Vec random_vector(std::size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Vec v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of `loss` w.r.t. `x` (perturbed in place).
// Central differences in double are accurate to ~1e-9 relative at unit magnitudes.
inline void expect_matches_finite_differences(Vec& x, const Vec& analytic,
                                              const std::function<double()>& loss,
                                              const char* what) {
  const double h = 1e-6;
  double max_error = 0, max_ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    max_error = std::max(max_error, std::abs(numeric - analytic[i]));
    max_ref = std::max(max_ref, std::abs(numeric));
  }
  EXPECT_LE(max_error, 1e-6 * std::max(1.0, max_ref))
      << what << ": max |numeric - analytic| = " << max_error;
}

}  // namespace strata::testing
