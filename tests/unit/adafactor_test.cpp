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
#include "tests/support/thread_group.h"
#include "train/optimizer/adafactor.h"

namespace strata {
namespace {

const GptShape kShape{2, 2, 32, 16, 100};
constexpr int kSteps = 4;

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

double lr_of(int step) { return 1e-2 / step; }  // a schedule: each step its own lr

// Values that are a function of (seed, tensor, logical index): the same under any layout.
// (A splitmix64 hash mapped to [-1, 1).)
float logical_value(std::uint64_t seed, std::size_t tensor, std::int64_t logical) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15u + tensor * 0xBF58476D1CE4E5B9u +
                    static_cast<std::uint64_t>(logical) * 0x94D049BB133111EBu;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
}

// The index of tensor `name` in the whole model's layout.
std::size_t whole_index(const std::string& name) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kShape);
  std::size_t k = 0;
  while (whole.tensors().at(k).name != name) ++k;
  return k;
}

// The layout's elements filled with logical_value (0 in the padding).
std::vector<float> layout_values(const ParameterLayout& layout, std::size_t buffer,
                                 std::uint64_t seed) {
  std::vector<float> values(buffer, 0.0f);
  for (const TensorView& t : layout.tensors()) {
    const std::size_t k = whole_index(t.name);
    for (std::size_t i = 0; i < t.size; ++i)
      values[t.offset + i] =
          logical_value(seed, k, t.slice.logical_index(static_cast<std::int64_t>(i)));
  }
  return values;
}

// The reference: the update rule on each whole logical tensor, in double.
struct Reference {
  std::vector<std::vector<double>> params;  // per tensor of the whole layout, logical order
};
Reference reference_run(const OptimizerConfig& config, double grad_scale) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const AdafactorConfig& a = config.adafactor;
  Reference out;
  const auto& tensors = layout.tensors();
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const TensorView& t = tensors[k];
    const bool matrix = t.shape.size() == 2;
    const std::int64_t rows = matrix ? t.shape[0] : 1, cols = matrix ? t.shape[1] : t.shape[0];
    const std::size_t n = t.size;
    std::vector<double> p(n), m(n, 0.0), row(rows, 0.0), col(cols, 0.0), v(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) p[i] = logical_value(1, k, static_cast<std::int64_t>(i));
    for (int step = 1; step <= kSteps; ++step) {
      const double lr = lr_of(step), w = std::pow(step, a.decay_rate);
      std::vector<double> g(n), u(n);
      for (std::size_t i = 0; i < n; ++i)
        g[i] = static_cast<double>(logical_value(100 + step, k, static_cast<std::int64_t>(i))) *
               static_cast<float>(grad_scale);
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
    out.params.push_back(std::move(p));
  }
  return out;
}

// kSteps updates of `range` of a buffer over `layout` (a partition of kShape) by this rank.
std::vector<float> optimizer_run(const ParameterLayout& layout, ElementRange range,
                                 std::size_t buffer, const OptimizerConfig& config,
                                 OptimizerGroups groups, double grad_scale) {
  Adafactor optimizer(layout, range, config, groups);
  std::vector<float> params = layout_values(layout, buffer, 1);
  for (int step = 1; step <= kSteps; ++step) {
    const std::vector<float> grads = layout_values(layout, buffer, 100 + step);
    optimizer.update(params.data() + range.begin, grads.data() + range.begin,
                     OptimizerStep{lr_of(step), grad_scale, step});
  }
  return params;
}

// Every element of `range` of a run over `layout` against the reference, by logical index.
void expect_reference(const Reference& ref, const ParameterLayout& layout, ElementRange range,
                      const std::vector<float>& params, const std::string& what) {
  int checked = 0;
  for (const TensorView& t : layout.tensors()) {
    const std::size_t k = whole_index(t.name);
    for (std::size_t i = 0; i < t.size; ++i) {
      if (!range.contains(t.offset + i)) continue;
      const double expected =
          ref.params[k]
                    [static_cast<std::size_t>(t.slice.logical_index(static_cast<std::int64_t>(i)))];
      const double got = params[t.offset + i];
      ASSERT_NEAR(got, expected, 2e-6 * (1 + std::abs(expected)))
          << what << ": " << t.name << " element " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << what;
}

class AdafactorRule : public ::testing::TestWithParam<std::pair<bool, double>> {};

TEST_P(AdafactorRule, TheWholeBufferFollowsTheUpdateRuleInDouble) {
  const auto [relative_step, beta1] = GetParam();
  const OptimizerConfig config = adafactor_config(relative_step, beta1);
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const std::size_t buffer = layout.padded_total(1);
  const std::vector<float> params =
      optimizer_run(layout, {0, buffer}, buffer, config, {}, /*grad_scale=*/0.5);
  expect_reference(reference_run(config, 0.5), layout, {0, buffer}, params, "whole");
  // The padding past the layout is never touched.
  for (std::size_t i = layout.total(); i < buffer; ++i) EXPECT_EQ(params[i], 0.0f);
}

TEST_P(AdafactorRule, ZeroShardsSumTheirStatisticsToTheWholeBuffers) {
  const auto [relative_step, beta1] = GetParam();
  const OptimizerConfig config = adafactor_config(relative_step, beta1);
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const Reference ref = reference_run(config, 1.0);
  for (int shards : {2, 3, 4}) {
    const std::size_t buffer = layout.padded_total(shards);
    testing::ThreadGroup group(shards);
    std::vector<std::vector<float>> results(shards);
    group.run([&](int r) {
      testing::ThreadRank owners(group, r);
      results[r] = optimizer_run(layout, layout.shard(r, shards), buffer, config,
                                 OptimizerGroups{&owners, nullptr}, 1.0);
    });
    for (int r = 0; r < shards; ++r)
      expect_reference(ref, layout, layout.shard(r, shards), results[r],
                       "shard " + std::to_string(r) + " of " + std::to_string(shards));
  }
}

TEST_P(AdafactorRule, TensorParallelSlicesAndShardsOfThemSumToTheWholeTensors) {
  const auto [relative_step, beta1] = GetParam();
  const OptimizerConfig config = adafactor_config(relative_step, beta1);
  const Reference ref = reference_run(config, 1.0);
  constexpr int kTp = 2, kShards = 2;
  // Rank (s, t): shard s of tp rank t's layout; owners groups over s, tp groups over t.
  std::vector<ParameterLayout> layouts;
  for (int t = 0; t < kTp; ++t) {
    ModelPartition p = ModelPartition::whole(kShape);
    p.tp_rank = t;
    p.tp_size = kTp;
    layouts.push_back(ParameterLayout::for_partition(kShape, p));
  }
  for (int shards : {1, kShards}) {
    std::vector<std::unique_ptr<testing::ThreadGroup>> owner_groups, tp_groups;
    for (int t = 0; t < kTp; ++t)
      owner_groups.push_back(std::make_unique<testing::ThreadGroup>(shards));
    for (int s = 0; s < shards; ++s)
      tp_groups.push_back(std::make_unique<testing::ThreadGroup>(kTp));
    testing::ThreadGroup all(kTp * shards);
    std::vector<std::vector<float>> results(kTp * shards);
    all.run([&](int rank) {
      const int t = rank / shards, s = rank % shards;
      testing::ThreadRank owners(*owner_groups[t], s), tp(*tp_groups[s], t);
      const std::size_t buffer = layouts[t].padded_total(shards);
      results[rank] = optimizer_run(layouts[t], layouts[t].shard(s, shards), buffer, config,
                                    OptimizerGroups{shards > 1 ? &owners : nullptr, &tp}, 1.0);
    });
    for (int rank = 0; rank < kTp * shards; ++rank) {
      const int t = rank / shards, s = rank % shards;
      expect_reference(ref, layouts[t], layouts[t].shard(s, shards), results[rank],
                       "tp rank " + std::to_string(t) + ", shard " + std::to_string(s) + " of " +
                           std::to_string(shards));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(StepSizes, AdafactorRule,
                         ::testing::Values(std::pair{false, 0.0}, std::pair{true, 0.0},
                                           std::pair{false, 0.9}));

TEST(AdafactorState, FactorsMatricesAndKeepsVectorsWhole) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const std::size_t buffer = layout.padded_total(1);
  Adafactor optimizer(layout, {0, buffer}, adafactor_config(false, 0.0), {});
  std::map<std::string, std::vector<TensorStatistic>> by_name;
  for (const StateBuffer& s : optimizer.save()) {
    EXPECT_TRUE(s.per_tensor) << s.name;
    by_name[s.name] = s.statistics;
  }
  ASSERT_EQ(by_name.size(), 3u);  // row, col, v: no first moment at beta1 0
  const TensorStatistic qkv_rows{"h.0.attn.qkv.weight", 3 * kShape.d_model};
  const TensorStatistic qkv_cols{"h.0.attn.qkv.weight", kShape.d_model};
  EXPECT_NE(std::find(by_name["row"].begin(), by_name["row"].end(), qkv_rows),
            by_name["row"].end());
  EXPECT_NE(std::find(by_name["col"].begin(), by_name["col"].end(), qkv_cols),
            by_name["col"].end());
  const TensorStatistic ln{"h.1.ln2.bias", kShape.d_model};
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
