// Adafactor (train/optimizer/adafactor.h) against its update rule computed directly in double on
// whole logical tensors, and split: ZeRO shards over thread ranks, tensor-parallel slices, and
// both at once compute what the whole buffer computes (the statistics summed over the groups).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "tests/support/optimizer_runs.h"
#include "train/optimizer/adafactor.h"

namespace strata {
namespace {

using testing::kOptimizerShape;
using testing::kOptimizerSteps;
constexpr double kTolerance = 2e-6;

OptimizerConfig adafactor_config(bool relative_step, double beta1) {
  OptimizerConfig config;
  config.name = OptimizerName::adafactor;
  config.weight_decay = 0.1;
  config.adafactor.relative_step = relative_step;
  config.adafactor.beta1 = beta1;
  // A threshold the updates cross, so that the clipping is exercised.
  config.adafactor.clip_threshold = 0.5;
  return config;
}

// The reference: the update rule on each whole logical tensor, in double.
testing::ReferenceParams reference_run(const OptimizerConfig& config, double grad_scale) {
  const ParameterLayout layout = ParameterLayout::for_gpt(testing::kOptimizerShape);
  const AdafactorConfig& a = config.adafactor;
  testing::ReferenceParams out;
  const auto& tensors = layout.tensors();
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const TensorView& t = tensors[k];
    const bool matrix = t.shape.size() == 2;
    const std::int64_t rows = matrix ? t.shape[0] : 1, cols = matrix ? t.shape[1] : t.shape[0];
    const std::size_t n = t.size;
    std::vector<double> p = testing::initial_params(k, n), m(n, 0.0), row(rows, 0.0),
                        col(cols, 0.0), v(n, 0.0);
    for (int step = 1; step <= kOptimizerSteps; ++step) {
      const double lr = testing::step_lr(step), w = std::pow(step, a.decay_rate);
      const std::vector<double> g = testing::step_grads(k, n, step, grad_scale);
      std::vector<double> u(n);
      if (matrix) {
        double row_total = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          double s = 0;
          for (std::int64_t c = 0; c < cols; ++c) s += g[r * cols + c] * g[r * cols + c];
          row[r] += w * (s / cols - row[r]);
          row_total += row[r];
        }
        for (std::int64_t c = 0; c < cols; ++c) {
          double s = 0;
          for (std::int64_t r = 0; r < rows; ++r) s += g[r * cols + c] * g[r * cols + c];
          col[c] += w * (s / rows - col[c]);
        }
        const double row_mean = std::max(row_total / rows, a.eps1);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c) {
            const double var = row[r] * col[c] / row_mean;
            u[r * cols + c] = g[r * cols + c] / std::sqrt(std::max(var, a.eps1 * a.eps1));
          }
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          v[i] += w * (g[i] * g[i] - v[i]);
          u[i] = g[i] / std::sqrt(std::max(v[i], a.eps1 * a.eps1));
        }
      }
      double u2 = 0, p2 = 0;
      for (std::size_t i = 0; i < n; ++i) u2 += u[i] * u[i], p2 += p[i] * p[i];
      const double denom = std::max(1.0, std::sqrt(u2 / n) / a.clip_threshold);
      const double alpha = a.relative_step ? std::max(a.eps2, std::sqrt(p2 / n)) *
                                                 std::min(lr, 1.0 / std::sqrt(step))
                                           : lr;
      const double decay = t.decay ? 1.0 - lr * config.weight_decay : 1.0;
      for (std::size_t i = 0; i < n; ++i) {
        p[i] *= decay;
        if (a.beta1 > 0) {
          m[i] = a.beta1 * m[i] + (1 - a.beta1) * u[i] / denom;
          p[i] -= alpha * m[i];
        } else {
          p[i] -= alpha * u[i] / denom;
        }
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

class AdafactorRule : public ::testing::TestWithParam<std::pair<bool, double>> {};

TEST_P(AdafactorRule, TheWholeBufferFollowsTheUpdateRuleInDouble) {
  const auto [relative_step, beta1] = GetParam();
  const OptimizerConfig config = adafactor_config(relative_step, beta1);
  testing::expect_whole_run(reference_run(config, 0.5), config, kTolerance);
}

TEST_P(AdafactorRule, ZeroShardsSumTheirStatisticsToTheWholeBuffers) {
  const auto [relative_step, beta1] = GetParam();
  const OptimizerConfig config = adafactor_config(relative_step, beta1);
  testing::expect_shard_runs(reference_run(config, 1.0), config, kTolerance);
}

TEST_P(AdafactorRule, TensorParallelSlicesAndShardsOfThemSumToTheWholeTensors) {
  const auto [relative_step, beta1] = GetParam();
  const OptimizerConfig config = adafactor_config(relative_step, beta1);
  testing::expect_tensor_parallel_runs(reference_run(config, 1.0), config, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(StepSizes, AdafactorRule,
                         ::testing::Values(std::pair{false, 0.0}, std::pair{true, 0.0},
                                           std::pair{false, 0.9}));

TEST(AdafactorState, FactorsMatricesAndKeepsVectorsWhole) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  Adafactor optimizer(layout, {0, buffer}, adafactor_config(false, 0.0), {});
  std::map<std::string, std::vector<TensorStatistic>> by_name;
  for (const StateBuffer& s : optimizer.save()) {
    EXPECT_TRUE(s.per_tensor) << s.name;
    by_name[s.name] = s.statistics;
  }
  ASSERT_EQ(by_name.size(), 3u);  // row, col, v: no first moment at beta1 0
  const TensorStatistic qkv_rows{"h.0.attn.qkv.weight", 3 * kOptimizerShape.d_model};
  const TensorStatistic qkv_cols{"h.0.attn.qkv.weight", kOptimizerShape.d_model};
  EXPECT_NE(std::find(by_name["row"].begin(), by_name["row"].end(), qkv_rows),
            by_name["row"].end());
  EXPECT_NE(std::find(by_name["col"].begin(), by_name["col"].end(), qkv_cols),
            by_name["col"].end());
  const TensorStatistic ln{"h.1.ln2.bias", kOptimizerShape.d_model};
  EXPECT_NE(std::find(by_name["v"].begin(), by_name["v"].end(), ln), by_name["v"].end());
  // Far less than AdamW's two values per element.
  EXPECT_LT(optimizer.state_bytes(), layout.total() * sizeof(float) / 4);
  Adafactor with_momentum(layout, {0, buffer}, adafactor_config(false, 0.9), {});
  const std::vector<StateBuffer> buffers = with_momentum.save();
  EXPECT_EQ(buffers.front().name, "m");
  EXPECT_FALSE(buffers.front().per_tensor);
  EXPECT_EQ(buffers.front().values.size(), buffer);
  // load() takes its own buffers back and refuses others.
  with_momentum.load(buffers);
  std::vector<StateBuffer> wrong = buffers;
  wrong.front().values.pop_back();
  EXPECT_THROW(with_momentum.load(wrong), Error);
  EXPECT_THROW(with_momentum.load({{"moment", {}, {}}}), Error);
}

}  // namespace
}  // namespace strata
