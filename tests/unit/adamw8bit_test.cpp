// AdamW with 8-bit moments (train/optimizer/adamw8bit.h, model/kernels/dynamic_quant.h): the code
// tables, the nearest-code rounding and its stated error bound; every update against AdamW's rule
// computed in double from the stored codes and scales (the new scales, the weights, and each new
// code the nearest one); ZeRO shards and tensor-parallel slices, whose blocks span ranks, compute
// what the whole buffer computes; the state round-trips through save() and load().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/dynamic_quant.h"
#include "model/parameter_layout.h"
#include "tests/support/optimizer_runs.h"
#include "train/optimizer/adamw8bit.h"

namespace strata {
namespace {

using testing::kOptimizerShape;
using testing::kOptimizerSteps;

OptimizerConfig adamw8bit_config(int block_size) {
  OptimizerConfig config;
  config.name = OptimizerName::adamw8bit;
  config.adamw8bit.block_size = block_size;
  config.weight_decay = 0.1;
  return config;
}

template <std::size_t N>
void expect_ascending_to_one(const std::array<float, N>& table, int top_decade_codes) {
  EXPECT_EQ(table.front(), 0.0f);
  EXPECT_EQ(table.back(), 1.0f);
  for (std::size_t i = 1; i < N; ++i) ASSERT_LT(table[i - 1], table[i]) << i;
  EXPECT_EQ(std::count_if(table.begin(), table.end(), [](float x) { return x > 0.1f; }),
            top_decade_codes);
}

TEST(DynamicCodes, TablesAreAscendingDecadesEndingAtOne) {
  const DynamicCodes& codes = dynamic_codes();
  expect_ascending_to_one(codes.magnitude, 64);
  expect_ascending_to_one(codes.unsigned_code, 128);
  EXPECT_FLOAT_EQ(codes.magnitude[1], 1e-6f);  // the smallest of each
  EXPECT_FLOAT_EQ(codes.unsigned_code[1], 1e-7f);
}

// The index of the entry nearest to y by exhaustive search (ties to the lower).
template <std::size_t N>
int nearest_by_search(const std::array<float, N>& table, float y) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(N); ++i)
    if (std::fabs(table[i] - y) < std::fabs(table[best] - y)) best = i;
  return best;
}

TEST(DynamicCodes, QuantisationTakesTheNearestCode) {
  const DynamicCodes& codes = dynamic_codes();
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f), exponent(-9.0f, 0.0f);
  for (int i = 0; i < 20000; ++i) {
    const float y = i % 2 ? uniform(random) : std::pow(10.0f, exponent(random));
    ASSERT_EQ(nearest_code(codes.magnitude.data(), kSignedMagnitudes, y),
              nearest_by_search(codes.magnitude, y))
        << y;
    ASSERT_EQ(nearest_code(codes.unsigned_code.data(), kUnsignedCodes, y),
              nearest_by_search(codes.unsigned_code, y))
        << y;
  }
  // The codes themselves, and 0, 1 and past 1.
  for (int c = 0; c < kSignedMagnitudes; ++c)
    EXPECT_EQ(nearest_code(codes.magnitude.data(), kSignedMagnitudes, codes.magnitude[c]), c);
  EXPECT_EQ(nearest_code(codes.unsigned_code.data(), kUnsignedCodes, 1.5f), kUnsignedCodes - 1);
}

// Half the gap between the codes of `table` around y, the bound of the rounding.
template <std::size_t N>
double half_gap(const std::array<float, N>& table, double y) {
  const auto above = std::upper_bound(table.begin(), table.end(), static_cast<float>(y));
  if (above == table.end()) return 0.0;
  return (static_cast<double>(*above) - *(above - 1)) / 2;
}

TEST(DynamicCodes, ErrorStaysWithinItsBound) {
  const DynamicCodes& codes = dynamic_codes();
  std::mt19937 random(11);
  std::uniform_real_distribution<double> exponent(-10.0, 0.0), sign(-1.0, 1.0);
  double worst_m = 0, worst_v = 0;
  for (int block = 0; block < 200; ++block) {
    // Values over ten decades, as moments are.
    std::vector<float> x(256);
    for (float& value : x)
      value = static_cast<float>(std::copysign(std::pow(10.0, exponent(random)), sign(random)));
    float scale = 0, scale_v = 0;
    for (const float value : x) scale = std::max(scale, std::fabs(value));
    for (const float value : x) scale_v = std::max(scale_v, value * value);
    // fp32's own error in |x|/scale and in code·scale: a few ulps of the scale.
    const double ulps = 4 * 0x1p-24;
    for (const float value : x) {
      const float back = dequantize_signed(
          codes.magnitude.data(), quantize_signed(codes.magnitude.data(), value, scale), scale);
      const double error = std::fabs(static_cast<double>(back) - value) / scale;
      ASSERT_LE(error, half_gap(codes.magnitude, std::fabs(value) / scale) + ulps) << value;
      ASSERT_LE(error, 0.9 / 64 / 2 + ulps);  // the top decade's
      worst_m = std::max(worst_m, error);
      const float v = value * value;
      const std::uint8_t code = quantize_unsigned(codes.unsigned_code.data(), v, scale_v);
      ASSERT_GT(code, 0) << "a positive second moment stored as 0";
      const double error_v = std::fabs(static_cast<double>(dequantize_unsigned(
                                           codes.unsigned_code.data(), code, scale_v)) -
                                       v) /
                             scale_v;
      const double bound_v = std::max(half_gap(codes.unsigned_code, v / scale_v), 1e-7);
      ASSERT_LE(error_v, bound_v + ulps) << v;
      ASSERT_LE(error_v, 0.9 / 128 / 2 + ulps);
      worst_v = std::max(worst_v, error_v);
    }
    // The largest of a block is stored exactly.
    EXPECT_EQ(dequantize_signed(codes.magnitude.data(),
                                quantize_signed(codes.magnitude.data(), -scale, scale), scale),
              -scale);
  }
  EXPECT_GT(worst_m, 0.9 / 64 / 2 * 0.9);  // the bound is reached, not loose
  EXPECT_GT(worst_v, 0.9 / 128 / 2 * 0.9);
}

// The stored state of a run on the whole buffer: codes per element, scales per tensor.
struct Stored {
  std::vector<float> m, v;
  std::map<std::string, std::vector<float>> m_scale, v_scale;
};
Stored stored(const Optimizer& optimizer) {
  Stored s;
  for (const StateBuffer& b : optimizer.save()) {
    if (!b.per_tensor) {
      (b.name == "m" ? s.m : s.v) = b.values;
      continue;
    }
    std::size_t at = 0;
    for (const TensorStatistic& t : b.statistics) {
      const auto begin = b.values.begin() + static_cast<std::ptrdiff_t>(at);
      (b.name == "m_scale" ? s.m_scale : s.v_scale)[t.tensor].assign(begin, begin + t.size);
      at += static_cast<std::size_t>(t.size);
    }
  }
  return s;
}

class AdamW8bitRule : public ::testing::TestWithParam<int> {};

// Each update against AdamW in double from the codes and scales stored before it: the new scales
// are the blocks' largest new |m| and v, the weights AdamW's, and every new code is the one
// nearest to its value, or its neighbour where the value is within 1e-5 (relative) + 1e-6 of the
// block's scale of the midpoint between them (fp32 and double may round such a value either way:
// a small m is the difference of larger terms, with their absolute error).
TEST_P(AdamW8bitRule, EachUpdateFollowsAdamWInDoubleFromTheStoredState) {
  const int block = GetParam();
  const OptimizerConfig config = adamw8bit_config(block);
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  AdamW8bit optimizer(layout, {0, buffer}, config, {});
  const DynamicCodes& codes = dynamic_codes();
  std::vector<float> params = testing::layout_values(layout, buffer, 1);
  int ambiguous = 0, checked = 0;
  for (int step = 1; step <= kOptimizerSteps; ++step) {
    const Stored before = stored(optimizer);
    const std::vector<float> grads = testing::layout_values(layout, buffer, 100 + step);
    const std::vector<float> old_params = params;
    const double lr = testing::step_lr(step), grad_scale = 0.5;
    optimizer.update(params.data(), grads.data(), OptimizerStep{lr, grad_scale, step});
    const Stored after = stored(optimizer);
    const double bias1 = 1 - std::pow(config.beta1, step), bias2 = 1 - std::pow(config.beta2, step);
    for (const TensorView& t : layout.tensors()) {
      for (std::size_t first = 0; first < t.size; first += static_cast<std::size_t>(block)) {
        const std::size_t end = std::min(t.size, first + static_cast<std::size_t>(block));
        const std::size_t b = first / static_cast<std::size_t>(block);
        std::vector<double> m(end - first), v(end - first);
        double largest_m = 0, largest_v = 0;
        for (std::size_t i = first; i < end; ++i) {
          const std::size_t e = t.offset + i;
          const auto m_code = static_cast<int>(before.m[e]);
          double mi = codes.magnitude[static_cast<std::size_t>(std::abs(m_code))] *
                      static_cast<double>(before.m_scale.at(t.name)[b]) * (m_code < 0 ? -1 : 1);
          double vi = codes.unsigned_code[static_cast<std::size_t>(before.v[e])] *
                      static_cast<double>(before.v_scale.at(t.name)[b]);
          const double g = grads[e] * grad_scale;
          mi = config.beta1 * mi + (1 - config.beta1) * g;
          vi = config.beta2 * vi + (1 - config.beta2) * g * g;
          const double p = old_params[e];
          const double expected = p - lr * ((mi / bias1) / (std::sqrt(vi / bias2) + config.eps) +
                                            (t.decay ? config.weight_decay : 0.0) * p);
          ASSERT_NEAR(params[e], expected, 1e-6 * (1 + std::fabs(expected)))
              << t.name << " element " << i << " step " << step;
          m[i - first] = mi;
          v[i - first] = vi;
          largest_m = std::max(largest_m, std::fabs(mi));
          largest_v = std::max(largest_v, vi);
        }
        const double m_scale = after.m_scale.at(t.name)[b], v_scale = after.v_scale.at(t.name)[b];
        ASSERT_NEAR(m_scale, largest_m, 1e-5 * largest_m) << t.name << " block " << b;
        ASSERT_NEAR(v_scale, largest_v, 1e-5 * largest_v) << t.name << " block " << b;
        for (std::size_t i = first; i < end; ++i) {
          const double y_m = std::fabs(m[i - first]) / m_scale, y_v = v[i - first] / v_scale;
          const int want_m = nearest_by_search(codes.magnitude, static_cast<float>(y_m));
          const int got_m = static_cast<int>(std::fabs(after.m[t.offset + i]));
          const int want_v =
              std::max(1, nearest_by_search(codes.unsigned_code, static_cast<float>(y_v)));
          const int got_v = static_cast<int>(after.v[t.offset + i]);
          auto near_midpoint = [](const auto& table, int a, int c, double y) {
            if (std::abs(a - c) != 1) return false;
            const double mid = (static_cast<double>(table[static_cast<std::size_t>(a)]) +
                                table[static_cast<std::size_t>(c)]) /
                               2;
            return std::fabs(y - mid) <= 1e-5 * mid + 1e-6;
          };
          if (got_m != want_m || got_v != want_v) {
            ASSERT_TRUE(got_m == want_m || near_midpoint(codes.magnitude, got_m, want_m, y_m))
                << t.name << " element " << i << ": m code " << got_m << ", nearest " << want_m;
            ASSERT_TRUE(got_v == want_v || near_midpoint(codes.unsigned_code, got_v, want_v, y_v))
                << t.name << " element " << i << ": v code " << got_v << ", nearest " << want_v;
            ++ambiguous;
          }
          if (m[i - first] != 0) {
            ASSERT_EQ(after.m[t.offset + i] < 0, m[i - first] < 0 && got_m != 0) << t.name;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_LT(ambiguous, checked / 1000);
}

// The whole buffer's run with unit gradient scale, as per-tensor logical values.
testing::ReferenceParams whole_run(const OptimizerConfig& config) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  const std::vector<float> params =
      testing::optimizer_run(layout, {0, buffer}, buffer, config, {}, 1.0);
  testing::ReferenceParams ref;
  for (const TensorView& t : layout.tensors())
    ref.emplace_back(params.begin() + static_cast<std::ptrdiff_t>(t.offset),
                     params.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size));
  return ref;
}

TEST_P(AdamW8bitRule, ZeroShardsAgreeOnTheBlocksTheyShare) {
  const OptimizerConfig config = adamw8bit_config(GetParam());
  testing::expect_shard_runs(whole_run(config), config, 1e-6);
}

TEST_P(AdamW8bitRule, TensorParallelSlicesAndShardsOfThemAgreeOnTheirBlocks) {
  const OptimizerConfig config = adamw8bit_config(GetParam());
  testing::expect_tensor_parallel_runs(whole_run(config), config, 1e-6);
}

// 2048 (the default: a block holds whole small tensors), 100 and 7 (blocks cut by shards and
// slices everywhere).
INSTANTIATE_TEST_SUITE_P(BlockSizes, AdamW8bitRule, ::testing::Values(2048, 100, 7));

TEST(AdamW8bitState, RoundTripsThroughSaveAndLoadAndRefusesOtherValues) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  const OptimizerConfig config = adamw8bit_config(100);
  AdamW8bit first(layout, {0, buffer}, config, {});
  std::vector<float> params = testing::layout_values(layout, buffer, 1);
  std::vector<float> grads = testing::layout_values(layout, buffer, 101);
  first.update(params.data(), grads.data(), OptimizerStep{1e-2, 1, 1});
  const std::vector<StateBuffer> state = first.save();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].stored, StoredType::int8);
  EXPECT_EQ(state[1].stored, StoredType::uint8);
  EXPECT_TRUE(state[2].per_tensor);
  AdamW8bit second(layout, {0, buffer}, config, {});
  second.load(state);
  std::vector<float> params2 = params;
  grads = testing::layout_values(layout, buffer, 102);
  first.update(params.data(), grads.data(), OptimizerStep{1e-2, 1, 2});
  second.update(params2.data(), grads.data(), OptimizerStep{1e-2, 1, 2});
  EXPECT_EQ(params, params2);  // exact
  std::vector<StateBuffer> wrong = state;
  wrong[0].values[3] = 0.5f;
  EXPECT_THROW(second.load(wrong), Error);
  wrong = state;
  wrong[1].values[3] = 256.0f;
  EXPECT_THROW(second.load(wrong), Error);
  wrong = state;
  wrong[2].values.pop_back();
  EXPECT_THROW(second.load(wrong), Error);
  // 2 bytes per element and 24 per block.
  std::size_t blocks = 0;
  for (const TensorView& t : layout.tensors()) blocks += (t.size + 99) / 100;
  EXPECT_EQ(first.state_bytes(), 2 * buffer + 24 * blocks);
}

}  // namespace
}  // namespace strata
