// Muon (train/optimizer/muon.h) against its update rule computed directly in double on whole
// logical tensors (Newton-Schulz in double for the matrices, AdamW for the rest), and split: ZeRO
// shards over thread ranks, tensor-parallel slices, and both at once compute what the whole
// buffer computes (each matrix gathered whole before its Newton-Schulz). Newton-Schulz itself:
// fp32 against fp64, and its result's singular values in the quintic's band.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "plan/optimizer_state.h"
#include "tests/support/optimizer_runs.h"
#include "train/optimizer/muon.h"
#include "train/optimizer/newton_schulz.h"

namespace strata {
namespace {

using testing::kOptimizerShape;
using testing::kOptimizerSteps;
constexpr double kTolerance = 2e-5;

OptimizerConfig muon_config(bool nesterov) {
  OptimizerConfig config;
  config.name = OptimizerName::muon;
  config.lr = 1e-2;  // step_lr's peak: the matrices' rate is muon.lr / step
  config.weight_decay = 0.1;
  config.muon.nesterov = nesterov;
  return config;
}

testing::ReferenceParams reference_run(const OptimizerConfig& config, double grad_scale) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const MuonConfig& mu = config.muon;
  testing::ReferenceParams out;
  const auto& tensors = layout.tensors();
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const TensorView& t = tensors[k];
    const std::size_t n = t.size;
    std::vector<double> p = testing::initial_params(k, n), m(n, 0.0), v(n, 0.0);
    for (int step = 1; step <= kOptimizerSteps; ++step) {
      const double lr = testing::step_lr(step);
      const std::vector<double> g = testing::step_grads(k, n, step, grad_scale);
      if (muon_updates(t)) {
        const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
        std::vector<double> o(n);
        for (std::size_t i = 0; i < n; ++i) {
          m[i] = mu.momentum * m[i] + g[i];
          o[i] = mu.nesterov ? g[i] + mu.momentum * m[i] : m[i];
        }
        newton_schulz(o.data(), rows, cols, mu.ns_steps);
        const double rate = mu.lr * lr / config.lr;
        const double scale = std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
        for (std::size_t i = 0; i < n; ++i)
          p[i] = p[i] * (1 - rate * config.weight_decay) - rate * scale * o[i];
      } else {
        const double decay = t.decay ? config.weight_decay : 0.0;
        for (std::size_t i = 0; i < n; ++i) {
          m[i] = config.beta1 * m[i] + (1 - config.beta1) * g[i];
          v[i] = config.beta2 * v[i] + (1 - config.beta2) * g[i] * g[i];
          const double m_hat = m[i] / (1 - std::pow(config.beta1, step));
          const double v_hat = v[i] / (1 - std::pow(config.beta2, step));
          p[i] -= lr * (m_hat / (std::sqrt(v_hat) + config.eps) + decay * p[i]);
        }
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

class MuonRule : public ::testing::TestWithParam<bool> {};

TEST_P(MuonRule, TheWholeBufferFollowsTheUpdateRuleInDouble) {
  const OptimizerConfig config = muon_config(GetParam());
  testing::expect_whole_run(reference_run(config, 0.5), config, kTolerance);
}

TEST_P(MuonRule, ZeroShardsGatherEachMatrixWhole) {
  const OptimizerConfig config = muon_config(GetParam());
  testing::expect_shard_runs(reference_run(config, 1.0), config, kTolerance);
}

TEST_P(MuonRule, TensorParallelSlicesAndShardsOfThemGatherEachMatrixWhole) {
  const OptimizerConfig config = muon_config(GetParam());
  testing::expect_tensor_parallel_runs(reference_run(config, 1.0), config, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Momentum, MuonRule, ::testing::Values(true, false));

TEST(NewtonSchulz, OrthogonalisesWideAndTallMatricesAsDoubleDoes) {
  for (const auto& [rows, cols] : {std::pair{24, 40}, std::pair{40, 24}, std::pair{32, 32}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    std::vector<float> x(n);
    std::vector<double> y(n);
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] = testing::logical_value(7, 0, i);
    newton_schulz(x.data(), rows, cols, 5);
    newton_schulz(y.data(), rows, cols, 5);
    for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(x[i], y[i], 1e-5) << i;
    // X·Xᵀ over the shorter side: its eigenvalues, the squared singular values, lie in the
    // quintic's band (about [0.7, 1.2] each, so their squares in [0.45, 1.45]); its trace over
    // the side is their mean.
    const int r = std::min(rows, cols);
    double trace = 0;
    for (int a = 0; a < r; ++a) {
      double d = 0;
      for (int b = 0; b < std::max(rows, cols); ++b) {
        const double e = rows <= cols ? y[static_cast<std::size_t>(a) * cols + b]
                                      : y[static_cast<std::size_t>(b) * cols + a];
        d += e * e;
      }
      EXPECT_GT(d, 0.3) << "row " << a;
      EXPECT_LT(d, 1.6) << "row " << a;
      trace += d;
    }
    EXPECT_NEAR(trace / r, 0.9, 0.35);
  }
}

TEST(MuonState, KeepsTheSecondMomentOfTheAdamWTensorsOnly) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  Muon optimizer(layout, {0, buffer}, muon_config(true), {});
  std::size_t matrices = 0;
  for (const TensorView& t : layout.tensors())
    if (muon_updates(t)) matrices += t.size;
  EXPECT_GT(matrices, layout.total() / 2);
  EXPECT_EQ(optimizer.state_bytes(), (2 * buffer - matrices - (buffer - layout.total())) * 4);
  // save() and load() round-trip; a buffer of another size is refused.
  std::vector<float> params = testing::layout_values(layout, buffer, 1);
  const std::vector<float> grads = testing::layout_values(layout, buffer, 2);
  optimizer.update(params.data(), grads.data(), OptimizerStep{1e-2, 1.0, 1});
  const std::vector<StateBuffer> saved = optimizer.save();
  ASSERT_EQ(saved.size(), 2u);
  Muon other(layout, {0, buffer}, muon_config(true), {});
  other.load(saved);
  const std::vector<StateBuffer> again = other.save();
  EXPECT_EQ(again[0].values, saved[0].values);
  EXPECT_EQ(again[1].values, saved[1].values);
  std::vector<StateBuffer> wrong = saved;
  wrong[1].values.pop_back();
  EXPECT_THROW(other.load(wrong), Error);
}

}  // namespace
}  // namespace strata
