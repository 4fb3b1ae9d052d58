// DiLoCo's outer optimizer (train/diloco/outer_optimizer.h): with lr 1 and momentum 0 the anchor
// becomes the workers' mean bit for bit (one worker: plain training; several: federated averaging),
// and otherwise it follows the paper's update (Nesterov or plain momentum) computed in double, to
// fp32 rounding, over several outer steps. A scaled step (diloco.outer_schedule: inner) at scale s
// is the step with lr 1 − (1 − lr)·s and momentum μ·s: s 1 the configured one bit for bit, s 0
// plain averaging.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/core/error.h"
#include "train/diloco/outer_optimizer.h"

namespace strata {
namespace {

std::vector<float> values(int seed, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i) + seed) *
                              std::pow(10.0, static_cast<double>(i % 9) - 6));
  v[0] = -0.0f;
  v[1] = 1e-40f;  // subnormal
  return v;
}

TEST(OuterOptimizer, LrOneMomentumZeroIsTheMeanBitForBit) {
  const std::size_t n = 300;
  for (bool nesterov : {true, false}) {
    OuterOptimizer outer({10, 10 + n}, {1.0, 0.0, nesterov});
    outer.set_anchor(values(1, n).data());
    // Three workers' parameters after a period, averaged in fp32 (federated averaging).
    std::vector<float> mean(n);
    for (std::size_t i = 0; i < n; ++i)
      mean[i] = (values(2, n)[i] + values(3, n)[i] + values(4, n)[i]) / 3.0f;
    std::vector<float> params(n, 7.0f);
    outer.step(mean.data(), params.data());
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::signbit(params[i]), std::signbit(mean[i])) << i;
      ASSERT_EQ(params[i], mean[i]) << i;
      ASSERT_EQ(outer.anchor()[i], mean[i]) << i;
    }
    // One worker: its own parameters come back unchanged, step after step (plain training).
    for (int s = 5; s < 8; ++s) {
      const std::vector<float> theta = values(s, n);
      outer.step(theta.data(), params.data());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(params[i], theta[i]) << s << " " << i;
    }
  }
}

TEST(OuterOptimizer, FollowsThePaperUpdate) {
  const std::size_t n = 200;
  for (bool nesterov : {true, false}) {
    const double lr = 0.7, mu = 0.9;
    OuterOptimizer outer({0, n}, {lr, mu, nesterov});
    std::vector<float> params = values(1, n);
    outer.set_anchor(params.data());
    std::vector<double> theta(params.begin(), params.end()), m(n, 0.0);
    for (int step = 0; step < 5; ++step) {
      std::vector<float> mean = values(10 + step, n);
      for (std::size_t i = 0; i < n; ++i) mean[i] = params[i] - 0.01f * mean[i];  // θ̄ near θ
      outer.step(mean.data(), params.data());
      for (std::size_t i = 0; i < n; ++i) {
        const double delta = theta[i] - mean[i];
        m[i] = mu * m[i] + delta;
        theta[i] -= lr * (nesterov ? delta + mu * m[i] : m[i]);
        // Plus a few subnormal ulps: element 1 starts subnormal.
        ASSERT_NEAR(params[i], theta[i], 1e-5 * std::fabs(theta[i]) + 1e-43)
            << "step " << step << " element " << i;
        // Δ = θ − θ̄ cancels: its fp32 error is relative to θ, not to Δ.
        ASSERT_NEAR(outer.momentum()[i], m[i],
                    1e-5 * (std::fabs(m[i]) + std::fabs(theta[i])) + 1e-43);
      }
    }
  }
}

TEST(OuterOptimizer, AScaledStepIsTheStepWithItsExtrapolationScaled) {
  const std::size_t n = 200;
  const double lr = 0.7, mu = 0.9;
  const std::vector<double> scales = {1.0, 0.25, 1.0, 0.0, 0.6};
  OuterOptimizer scaled({0, n}, {lr, mu, true});
  OuterOptimizer plain({0, n}, {lr, mu, true});
  std::vector<float> params = values(1, n), plain_params = params;
  scaled.set_anchor(params.data());
  plain.set_anchor(params.data());
  std::vector<double> theta(params.begin(), params.end()), m(n, 0.0);
  for (std::size_t step = 0; step < scales.size(); ++step) {
    const double s = scales[step];
    std::vector<float> mean = values(20 + static_cast<int>(step), n);
    for (std::size_t i = 0; i < n; ++i) mean[i] = params[i] - 0.01f * mean[i];
    scaled.step(mean.data(), params.data(), s);
    if (step == 0) {  // scale 1: the unscaled step, bit for bit
      plain.step(mean.data(), plain_params.data());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(params[i], plain_params[i]) << i;
    }
    const double lr_s = 1 - (1 - lr) * s, mu_s = mu * s;
    for (std::size_t i = 0; i < n; ++i) {
      const double delta = theta[i] - mean[i];
      m[i] = mu_s * m[i] + delta;
      theta[i] -= lr_s * (delta + mu_s * m[i]);
      if (s == 0) {  // plain averaging: the mean, bit for bit
        ASSERT_EQ(params[i], mean[i]) << i;
        theta[i] = mean[i];
      }
      ASSERT_NEAR(params[i], theta[i], 1e-5 * std::fabs(theta[i]) + 1e-43)
          << "step " << step << " element " << i;
      ASSERT_NEAR(scaled.momentum()[i], m[i],
                  1e-5 * (std::fabs(m[i]) + std::fabs(theta[i])) + 1e-43);
    }
  }
  std::vector<float> mean(n, 0.0f);
  EXPECT_THROW(scaled.step(mean.data(), params.data(), 1.5), Error);
}

}  // namespace
}  // namespace strata
