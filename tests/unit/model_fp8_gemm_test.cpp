// FP8 GEMMs on the CPU (model/ops/cpu_ops_fp8.cpp, docs/ARCHITECTURE.md §6 "FP8"): each of the
// three products of a linear layer multiplies the operands an FP8 tensor core would, cast by the
// recipe's scales (one per tensor, or one per row of the sum: rowwise), in the format of each
// operand (hybrid: e5m2 gradients), and stays within the error bound those casts allow of the
// exact product; the delayed recipe's amax histories push, expire and round-trip as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/fp8/fp8_state.h"
#include "model/gpt_shape.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/fp8.h"
#include "model/ops/cpu_ops.h"

namespace strata {
namespace {

std::vector<float> random_matrix(int rows, int cols, unsigned seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  for (float& x : m) x = normal(rng);
  return m;
}

// The test's own casts: x (rows, cols) through `format` with one scale per tensor, or per row
// (`per_row`) or column (`per_column`) from the amaxes of those values, written from the formats'
// definition (fp8_round is tested against a brute-force search in model_fp8_test).
enum class Granularity { tensor, row, column };
std::vector<float> cast(const std::vector<float>& x, int rows, int cols, Fp8Format format,
                        Granularity g) {
  std::vector<float> amax(g == Granularity::tensor ? 1 : g == Granularity::row ? rows : cols, 0);
  auto index = [&](int r, int c) {
    return static_cast<std::size_t>(g == Granularity::tensor ? 0 : g == Granularity::row ? r : c);
  };
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      amax[index(r, c)] = std::max(amax[index(r, c)], std::fabs(x[r * cols + c]));
  std::vector<float> out(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float s = fp8_scale(amax[index(r, c)], format);
      out[r * cols + c] = fp8_round(x[r * cols + c] * s, format) / s;
    }
  return out;
}

Fp8State state_of(Fp8Scaling scaling, Fp8Formats formats = Fp8Formats::hybrid, int history = 4) {
  Fp8Settings settings;
  settings.scaling = scaling;
  settings.formats = formats;
  settings.history = history;
  settings.min_size = 0;
  return Fp8State(settings, 0, {{true, true, true, true}});
}

constexpr int N = 24, IC = 40, OC = 36;

TEST(Fp8Gemm, ForwardMultipliesTheCastOperandsPerTensorOrPerRow) {
  const auto x = random_matrix(N, IC, 1, 2.0f), w = random_matrix(OC, IC, 2, 0.05f);
  for (Fp8Scaling scaling : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
    SCOPED_TRACE(std::string(kFp8ScalingChoices.word(scaling)));
    Fp8State state = state_of(scaling);
    CpuOps<float> ops(cpu::ComputeDtype::bf16);
    std::vector<float> out(N * OC);
    ops.matmul_forward(out.data(), nullptr, x.data(), w.data(), nullptr, N, IC, OC, Epilogue::bias,
                       Fp8Gemm{&state, 0, Fp8Layer::qkv, false});
    const Granularity g = scaling == Fp8Scaling::rowwise ? Granularity::row : Granularity::tensor;
    const auto xq = cast(x, N, IC, Fp8Format::e4m3, g), wq = cast(w, OC, IC, Fp8Format::e4m3, g);
    std::vector<float> expected(N * OC);
    cpu::matmul_forward(expected.data(), xq.data(), wq.data(), static_cast<const float*>(nullptr),
                        N, IC, OC);
    ops.round_to_compute(expected.data(), N * OC);
    EXPECT_EQ(out, expected);
  }
}

TEST(Fp8Gemm, BackwardCastsGradientsToE5m2InHybridAndSumsTheBiasUnquantised) {
  const auto x = random_matrix(N, IC, 3, 1.0f), w = random_matrix(OC, IC, 4, 0.1f);
  const auto dy = random_matrix(N, OC, 5, 1e-3f);
  for (Fp8Formats formats : {Fp8Formats::hybrid, Fp8Formats::e4m3}) {
    for (Fp8Scaling scaling : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
      SCOPED_TRACE(std::string(kFp8ScalingChoices.word(scaling)) + " " +
                   std::string(kFp8FormatsChoices.word(formats)));
      Fp8State state = state_of(scaling, formats);
      const Fp8Format grad = formats == Fp8Formats::hybrid ? Fp8Format::e5m2 : Fp8Format::e4m3;
      const bool rowwise = scaling == Fp8Scaling::rowwise;
      CpuOps<float> ops(cpu::ComputeDtype::bf16);
      const Fp8Gemm fp8{&state, 0, Fp8Layer::mlp_fc, false};
      // d input = dy · w, the sum over OC: dy per row, w per column.
      std::vector<float> dx(N * IC), expected_dx(N * IC);
      ops.matmul_backward_input(dx.data(), dy.data(), w.data(), nullptr, N, IC, OC, fp8);
      const auto dyq = cast(dy, N, OC, grad, rowwise ? Granularity::row : Granularity::tensor);
      const auto wq =
          cast(w, OC, IC, Fp8Format::e4m3, rowwise ? Granularity::column : Granularity::tensor);
      cpu::matmul_backward_input(expected_dx.data(), dyq.data(), wq.data(), N, IC, OC);
      ops.round_to_compute(expected_dx.data(), N * IC);
      EXPECT_EQ(dx, expected_dx);
      // d weight = dyᵀ · x, the sum over N: both per column; the bias from dy itself.
      std::vector<float> dw(OC * IC, 0.5f), db(OC, 0.25f), expected_dw(OC * IC, 0.5f),
          expected_db(OC, 0.25f);
      ops.matmul_backward_weight(dw.data(), db.data(), dy.data(), x.data(), N, IC, OC, fp8);
      const auto dyc = cast(dy, N, OC, grad, rowwise ? Granularity::column : Granularity::tensor);
      const auto xc =
          cast(x, N, IC, Fp8Format::e4m3, rowwise ? Granularity::column : Granularity::tensor);
      cpu::matmul_backward_weight(expected_dw.data(), static_cast<float*>(nullptr), dyc.data(),
                                  xc.data(), N, IC, OC);
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) expected_db[o] += dy[n * OC + o];
      EXPECT_EQ(dw, expected_dw);
      for (int o = 0; o < OC; ++o) EXPECT_NEAR(db[o], expected_db[o], 1e-6f);
    }
  }
}

// The bound of an e4m3 product against the exact one, per output element: each operand within
// 2^-4 relative (3 mantissa bits, round to nearest) or, below the normal range, 2^-10/scale
// absolute (half the smallest subnormal), then fp32 accumulation (K·2^-24 relative).
TEST(Fp8Gemm, StaysWithinTheCastsErrorBoundOfTheExactProduct) {
  const auto x = random_matrix(N, IC, 6, 3.0f), w = random_matrix(OC, IC, 7, 0.02f);
  Fp8State state = state_of(Fp8Scaling::tensorwise);
  CpuOps<float> ops(cpu::ComputeDtype::fp32);
  std::vector<float> out(N * OC);
  ops.matmul_forward(out.data(), nullptr, x.data(), w.data(), nullptr, N, IC, OC, Epilogue::bias,
                     Fp8Gemm{&state, 0, Fp8Layer::qkv, false});
  float amax_x = 0, amax_w = 0;
  for (float v : x) amax_x = std::max(amax_x, std::fabs(v));
  for (float v : w) amax_w = std::max(amax_w, std::fabs(v));
  const double ex = std::ldexp(1.0, -10) / fp8_scale(amax_x, Fp8Format::e4m3);
  const double ew = std::ldexp(1.0, -10) / fp8_scale(amax_w, Fp8Format::e4m3);
  const double u = std::ldexp(1.0, -4);
  double worst = 0;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double exact = 0, bound = 0;
      for (int k = 0; k < IC; ++k) {
        const double a = x[n * IC + k], b = w[o * IC + k];
        exact += a * b;
        bound += std::fabs(a * b) * (2 * u + u * u + IC * std::ldexp(1.0, -24)) +
                 ex * std::fabs(b) * (1 + u) + ew * std::fabs(a) * (1 + u) + ex * ew;
      }
      const double error = std::fabs(out[n * OC + o] - exact);
      EXPECT_LE(error, bound) << n << ", " << o;
      worst = std::max(worst, error / bound);
    }
  // The bound is not vacuous: the casts do lose what it allows for, in part.
  EXPECT_GT(worst, 0.01);
}

// The delayed recipe under an amax spike: an outlier 2^16× the history's amax saturates at the
// format's largest value (finite output, no NaN); the next steps scale by the spike and lose
// precision; once it leaves the history (2 steps here) the GEMM is again bitwise its first step's.
TEST(Fp8Gemm, DelayedScalingSaturatesASpikeAndRecoversWhenItLeavesTheHistory) {
  const auto x = random_matrix(N, IC, 8, 1.0f), w = random_matrix(OC, IC, 9, 0.1f);
  Fp8State state = state_of(Fp8Scaling::delayed, Fp8Formats::hybrid, 2);
  CpuOps<float> ops(cpu::ComputeDtype::fp32);
  const std::vector<Collectives*> alone;
  auto step = [&](const std::vector<float>& input) {
    state.begin_step();
    std::vector<float> out(N * OC);
    ops.matmul_forward(out.data(), nullptr, input.data(), w.data(), nullptr, N, IC, OC,
                       Epilogue::bias, Fp8Gemm{&state, 0, Fp8Layer::qkv, false});
    state.end_step(alone);
    return out;
  };
  auto error = [&](const std::vector<float>& out) {
    std::vector<float> exact(N * OC);
    cpu::matmul_forward(exact.data(), x.data(), w.data(), static_cast<const float*>(nullptr), N, IC,
                        OC);
    double e = 0;
    for (int i = 0; i < N * OC; ++i) e = std::max(e, std::fabs(double(out[i]) - exact[i]));
    return e;
  };
  const auto first = step(x);  // no history yet: the tensor's own amax
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  auto spiked = x;
  spiked[5] = 65536 * amax;
  const auto during = step(spiked);
  // Saturated: the outlier multiplied as the largest e4m3 value at the history's scale.
  const float scale = fp8_scale(amax, Fp8Format::e4m3);
  for (int o = 0; o < OC; ++o) {
    ASSERT_TRUE(std::isfinite(during[o])) << o;
    double bound = 0;
    for (int k = 0; k < IC; ++k)
      bound += std::fabs(w[o * IC + k]) * (k == 5 ? 448.0 / scale : 2.0 * amax);
    EXPECT_LE(std::fabs(during[o]), bound) << o;
  }
  EXPECT_EQ(state.history_amax(0, Fp8Layer::qkv, Fp8Operand::input), 65536 * amax);
  const auto after = step(x);  // scaled by the spike: coarser
  EXPECT_GT(error(after), 4 * error(first));
  step(x);                    // the spike's last step in the history
  EXPECT_EQ(step(x), first);  // gone: the first step's scale again
}

TEST(Fp8State, DelayedHistoriesPushTheStepsLargestAmaxAndForgetTheOldest) {
  Fp8State state = state_of(Fp8Scaling::delayed, Fp8Formats::hybrid, 3);
  const auto op = Fp8Operand::input;
  EXPECT_FALSE(state.has_history(0, Fp8Layer::qkv, op));
  std::vector<Collectives*> none;
  for (float amax : {2.0f, 8.0f, 1.0f, 0.5f, 0.25f}) {
    state.begin_step();
    state.record(0, Fp8Layer::qkv, op, 100.0f);  // evaluation's, forgotten by begin_step
    state.begin_step();
    state.record(0, Fp8Layer::qkv, op, amax / 2);
    state.record(0, Fp8Layer::qkv, op, amax);
    state.end_step(none);
  }
  // The last three steps: 1, 0.5, 0.25 (8 has expired).
  EXPECT_TRUE(state.has_history(0, Fp8Layer::qkv, op));
  EXPECT_EQ(state.history_amax(0, Fp8Layer::qkv, op), 1.0f);
  EXPECT_FALSE(state.has_history(0, Fp8Layer::qkv, Fp8Operand::weight));
  // A step whose amax is not finite pushes "nothing recorded".
  state.record(0, Fp8Layer::qkv, op, NAN);
  state.end_step(none);
  EXPECT_EQ(state.history_amax(0, Fp8Layer::qkv, op), 0.5f);
  // The checkpoint's values round-trip into a fresh state.
  Fp8State restored = state_of(Fp8Scaling::delayed, Fp8Formats::hybrid, 3);
  restored.set_histories(state.histories());
  EXPECT_EQ(restored.histories(), state.histories());
  EXPECT_EQ(restored.history_amax(0, Fp8Layer::qkv, op), 0.5f);
  EXPECT_EQ(state.histories().size(), 4u * 3u * 3u);
}

TEST(Fp8State, HistoriesAreNamedByTheirGemmsWeightTensors) {
  const GptShape shape(2, 2, 8, 4, 16);
  const ParameterLayout layout =
      ParameterLayout::for_partition(shape, ModelPartition::whole(shape));
  Fp8Settings settings;
  settings.scaling = Fp8Scaling::delayed;
  settings.min_size = 0;
  const Fp8State state(settings, 0, {{true, false, true, true}, {true, true, false, false}});
  const std::vector<std::string> expected{"h.0.attn.qkv.weight", "h.0.mlp.fc.weight",
                                          "h.0.mlp.proj.weight", "h.1.attn.qkv.weight",
                                          "h.1.attn.proj.weight"};
  EXPECT_EQ(state.history_tensors(layout), expected);
  for (const std::string& name : expected) EXPECT_TRUE(layout.has(name)) << name;
}

}  // namespace
}  // namespace strata
