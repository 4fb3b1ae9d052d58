// The whole CUDA model (model/gpt_cuda.h) against the CPU model (model/gpt.h) on tiny, ragged
// shapes: per-position losses and every parameter gradient of two accumulated forward_backward
// passes (fp32, and bf16/fp16 against the CPU's emulated rounding), bitwise equality of the
// recompute modes, one whole training step (norm, clipping, AdamW) and the evaluation logits.
// Shapes cover attention head sizes 16, 32, 48, 64 and 128, T not a multiple of the attention tile
// rows (32 fp32, 64 bf16/fp16), B·T and the vocabulary not multiples of 128 (padded vocab rows).
// A mixture-of-experts model (test_experts(): blocks 1 and 3 of 4 with 4 experts, top-2, a
// capacity that drops choices, both router losses) in fp32: losses, router losses, the routing
// figures (exactly) and every gradient against the CPU model, its recompute modes bitwise none,
// and its evaluation forward.
//
// Tolerances (relative error norm, cuda_test_support.h): fp32 1e-5 per tensor, as for one op: the
// device runs the CPU model's op order, only accumulation orders differ. bf16/fp16: see
// ReducedPrecisionMatchesEmulatingCpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "model/gpt.h"
#include "model/gpt_cuda.h"
#include "model/kernels/cpu/adamw.h"
#include "model/kernels/cpu/precision.h"
#include "model/kernels/cuda/adamw.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/cuda/grad_norm.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/cuda/gpt_test_support.h"
#include "tests/support/model_shapes.h"

namespace strata::cuda {
namespace {

using namespace testing;

// A model shape and the micro-batch (B, T) run on it.
struct Case {
  GptShape shape;
  int B, T;
  std::string name() const {  // a stream: GCC 12's -Wrestrict misfires on "L" + std::to_string
    std::ostringstream out;
    out << 'L' << shape.n_layer << " NH" << shape.n_head << " C" << shape.d_model << " V"
        << shape.vocab_size << " B" << B << " T" << T;
    if (shape.arch != GptArchitecture{})
      out << " llama KV" << shape.kv_head_count() << " F" << shape.ffn_width();
    return out.str();
  }
};

// hs 16, T = 37 < seq_len (unused wpe rows), B·T = 111, V 100 → Vp 128; hs 64 with whole tiles;
// hs 32, hs 48 (configs/fortunes.yaml's) and hs 128 ragged. The first two have two layers
// (recompute's workspace pays off). Then the Llama-style block (RMSNorm, SwiGLU, RoPE, no biases,
// the untied head): grouped-query attention at hs 16 and multi-query at hs 32.
const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {GptShape(2, 4, 64, 48, 100), 3, 37},
      {GptShape(2, 2, 128, 64, 200), 2, 64},
      {GptShape(1, 3, 96, 32, 300), 2, 19},
      {GptShape(1, 2, 96, 40, 150), 2, 33},
      {GptShape(1, 1, 128, 40, 130), 1, 40},
      {strata::testing::llama_shape(GptShape(2, 4, 64, 48, 100), 192, 2, 10000.0), 3, 37},
      {strata::testing::llama_shape(GptShape(1, 4, 128, 40, 130), 352, 1, 500000.0), 2, 40}};
  return all;
}

Batch random_batch(const Case& c, std::mt19937_64& rng) {
  return testing::random_batch(c.shape.vocab_size, static_cast<std::size_t>(c.B) * c.T, rng);
}

// Per micro-batch: mean and per-position losses and the router losses (0 without experts); the
// gradients accumulated over all of them, and the MoE blocks' routing figures (MoeTotals; empty
// without experts).
struct Passes {
  std::vector<double> mean_loss;
  std::vector<std::vector<float>> losses;
  std::vector<float> grads;
  std::vector<double> moe_loss;
  std::vector<double> moe_totals;
};

Passes run_cpu(const Case& c, const GptOptions& options, const std::vector<float>& params,
               const std::vector<Batch>& batches, float loss_scale) {
  Gpt<float> model(c.shape, c.B, options);
  Passes run{{}, {}, std::vector<float>(params.size(), 0.0f), {}, {}};
  for (const Batch& b : batches) {
    run.mean_loss.push_back(
        model.forward(params.data(), b.tokens.data(), b.targets.data(), c.B, c.T));
    run.losses.emplace_back(model.losses(), model.losses() + c.B * c.T);
    run.moe_loss.push_back(model.moe_loss());
    model.backward(params.data(), run.grads.data(), loss_scale);
  }
  model.take_moe_totals(run.moe_totals);
  return run;
}

// The device model on weights `params` stored in T (exact when the caller rounded them to T).
template <class T>
Passes run_device(DeviceContext& ctx, const Case& c, Recompute recompute,
                  const std::vector<float>& params, const std::vector<Batch>& batches,
                  float loss_scale, std::size_t* activation_bytes = nullptr) {
  CudaGpt<T> model(ctx, c.shape, c.B, recompute);
  DeviceBuffer<T> weights(to_dtype<T>(params));
  DeviceBuffer<float> grads(std::vector<float>(params.size(), 0.0f));
  Passes run;
  for (const Batch& b : batches) {
    model.forward_backward(weights.get(), grads.get(), b.tokens.data(), b.targets.data(), c.B, c.T,
                           loss_scale);
    run.mean_loss.push_back(model.loss_sum() / (c.B * c.T));
    run.losses.push_back(download(model.losses(), static_cast<std::size_t>(c.B) * c.T));
    run.moe_loss.push_back(model.moe_loss());
  }
  model.take_moe_totals(run.moe_totals);
  run.grads = grads.download();
  if (activation_bytes != nullptr) *activation_bytes = model.activation_bytes();
  return run;
}

void expect_gradients_near(const ParameterLayout& layout, const std::vector<float>& got,
                           const std::vector<float>& want, double tolerance,
                           const std::string& where) {
  ASSERT_EQ(got.size(), want.size());
  for (const TensorView& t : layout.tensors()) {
    const auto tensor = [&](const std::vector<float>& g) {
      return std::vector<float>(g.begin() + t.offset, g.begin() + t.offset + t.size);
    };
    EXPECT_LT(relative_error(tensor(got), tensor(want)), tolerance) << where << ' ' << t.name;
  }
}

void expect_run_near(const Passes& got, const Passes& want, const Case& c, double loss_tolerance,
                     double grad_tolerance) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.mean_loss[i], want.mean_loss[i], loss_tolerance * std::abs(want.mean_loss[i]))
        << c.name() << " micro-batch " << i;
    EXPECT_LT(relative_error(got.losses[i], want.losses[i]), loss_tolerance)
        << c.name() << " micro-batch " << i;
    EXPECT_NEAR(got.moe_loss[i], want.moe_loss[i], loss_tolerance * std::abs(want.moe_loss[i]))
        << c.name() << " router losses of micro-batch " << i;
  }
  expect_same_routing(got.moe_totals, want.moe_totals, c.shape, loss_tolerance, c.name());
  expect_gradients_near(ParameterLayout::for_gpt(c.shape), got.grads, want.grads, grad_tolerance,
                        c.name());
}

// Two micro-batches on different tokens: the second pass must add to the first's gradients.
// loss_scale 0.5 (as for two accumulated micro-batches) checks that the scale reaches every tensor.
TEST(CudaGpt, Fp32LossesAndGradientsMatchCpu) {
  auto rng = test_rng();
  DeviceContext ctx;
  for (const Case& c : cases()) {
    const std::vector<float> params = random_parameters(c.shape, rng);
    const std::vector<Batch> batches{random_batch(c, rng), random_batch(c, rng)};
    const Passes want = run_cpu(c, GptOptions{}, params, batches, 0.5f);
    const Passes got = run_device<float>(ctx, c, Recompute::none, params, batches, 0.5f);
    expect_run_near(got, want, c, kFp32Tolerance, kFp32Tolerance);
  }
}

template <class T>
class CudaGptReduced : public ::testing::Test {};
using ReducedDtypes = ::testing::Types<__nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudaGptReduced, ReducedDtypes, DtypeName);

// The CPU model emulates the dtype's rounding where a kernel stores T, from the same rounded
// weights. Differences remain at fused points (the fc GEMM's GELU and dGELU epilogues, which apply
// GELU to the unrounded pre-activation; flash attention, which rounds its unnormalised
// probabilities before P·V and never stores them), where one side rounds an intermediate the other
// keeps in fp32, and they compound through the
// layers forward and backward (LayerNorm and softmax backward amplify relative errors where their
// terms cancel). One bf16 rounding is ~2^-9/√3 ≈ 1e-3 rms; ~30 rounded ops lie between the loss
// and the first layer's weights, √30 independent ones ≈ 6e-3. Bounds: losses tolerance<T>() (the
// per-op bound; a loss is a sum over the vocabulary, its errors average out), gradients
// 5 × tolerance<T>() per tensor: bf16 5e-2, fp16 2.5e-2 (half, as the per-op bounds: 3 more
// mantissa bits, partly lost by attention probabilities and dS in fp16's narrow range).
TYPED_TEST(CudaGptReduced, ReducedPrecisionMatchesEmulatingCpu) {
  using T = TypeParam;
  const cpu::ComputeDtype dtype =
      std::is_same_v<T, __half> ? cpu::ComputeDtype::fp16 : cpu::ComputeDtype::bf16;
  // A power of two, as dynamic loss scaling would pick: the unscaled logit gradients are about
  // 1/(B·T·V) ≈ 1e-4, at fp16's subnormal edge (6e-5) where the two sides' roundings would differ
  // by whole bits. Both sides use it; relative errors do not depend on it.
  const float loss_scale = 1024.0f;
  auto rng = test_rng();
  DeviceContext ctx;
  for (const Case& c : cases()) {
    std::vector<float> params = random_parameters(c.shape, rng);
    cpu::round_to_dtype(params.data(), static_cast<long>(params.size()), dtype);
    const std::vector<Batch> batches{random_batch(c, rng), random_batch(c, rng)};
    const Passes want = run_cpu(c, GptOptions{dtype, Recompute::none}, params, batches, loss_scale);
    const Passes got = run_device<T>(ctx, c, Recompute::none, params, batches, loss_scale);
    expect_run_near(got, want, c, tolerance<T>(), 5 * tolerance<T>());
  }
}

template <class T>
class CudaGptRecompute : public ::testing::Test {};
using RecomputeDtypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaGptRecompute, RecomputeDtypes, DtypeName);

std::size_t bitwise_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return count;
}

// Losses, gradients, router losses and routing figures of the recompute modes, bit for bit.
void expect_recompute_bitwise(const Case& c, const Passes& none, const Passes& selective,
                              const Passes& full) {
  for (const Passes* run : {&selective, &full}) {
    const char* mode = run == &full ? " full" : " selective";
    for (std::size_t i = 0; i < none.losses.size(); ++i)
      EXPECT_EQ(bitwise_differences(run->losses[i], none.losses[i]), 0u) << c.name() << mode;
    EXPECT_EQ(bitwise_differences(run->grads, none.grads), 0u) << c.name() << mode;
    EXPECT_EQ(run->moe_loss, none.moe_loss) << c.name() << mode;
    EXPECT_EQ(run->moe_totals, none.moe_totals) << c.name() << mode;
  }
}

// Recomputation reruns the forward's own kernels on the same inputs, so losses and gradients are
// bitwise those of `none`; memory shrinks none > selective > full with two layers (the one-layer
// workspace is paid back by the layers that drop their activations).
TYPED_TEST(CudaGptRecompute, SelectiveAndFullAreBitwiseNoneInLessMemory) {
  using T = TypeParam;
  auto rng = test_rng();
  DeviceContext ctx;
  for (const Case& c : {cases()[0], cases()[1]}) {
    const std::vector<float> params = rounded<T>(random_parameters(c.shape, rng));
    const std::vector<Batch> batches{random_batch(c, rng), random_batch(c, rng)};
    std::size_t bytes_none = 0, bytes_selective = 0, bytes_full = 0;
    const Passes none = run_device<T>(ctx, c, Recompute::none, params, batches, 0.5f, &bytes_none);
    const Passes selective =
        run_device<T>(ctx, c, Recompute::selective, params, batches, 0.5f, &bytes_selective);
    const Passes full = run_device<T>(ctx, c, Recompute::full, params, batches, 0.5f, &bytes_full);
    expect_recompute_bitwise(c, none, selective, full);
    EXPECT_GT(bytes_none, bytes_selective) << c.name();
    EXPECT_GT(bytes_selective, bytes_full) << c.name();
  }
}

// Hyperparameters of a default OptimizerConfig (plan/config.h) at its first step.
cpu::AdamWHyper first_step(float weight_decay, float grad_scale) {
  return cpu::AdamWHyper{1e-3f, 0.9f, 0.95f, 1e-8f, weight_decay, 1, grad_scale};
}
constexpr float kWeightDecay = 0.1f;

// train/optimizer/optimizer.cpp's clip_factor and AdamW::step (decay on the layout's `decay`
// tensors), which this executable cannot link (tests/cuda link strata_cuda, not strata_train).
void cpu_first_step(const ParameterLayout& layout, std::vector<float>& params,
                    const std::vector<float>& grads, std::vector<float>& m, double grad_clip) {
  const double norm = std::sqrt(cpu::sum_of_squares(grads.data(), static_cast<long>(grads.size())));
  const double clip = norm > grad_clip ? grad_clip / norm : 1.0;
  std::vector<float> v(params.size(), 0.0f);
  m.assign(params.size(), 0.0f);
  for (const TensorView& t : layout.tensors())
    cpu::adamw_update(params.data() + t.offset, grads.data() + t.offset, m.data() + t.offset,
                      v.data() + t.offset, static_cast<long>(t.size),
                      first_step(t.decay ? kWeightDecay : 0.0f, static_cast<float>(clip)));
}

// One fp32 training step as the trainer takes it: zeroed gradients, two micro-batches at loss
// scale 1/2, the global norm and clip factor on the device, fused AdamW.
TEST(CudaGpt, Fp32TrainingStepMatchesCpu) {
  auto rng = test_rng();
  DeviceContext ctx;
  const Case& c = cases()[0];
  const ParameterLayout layout = ParameterLayout::for_gpt(c.shape);
  const long n = static_cast<long>(layout.total());
  const std::vector<float> params = random_parameters(c.shape, rng);
  const std::vector<Batch> batches{random_batch(c, rng), random_batch(c, rng)};
  const Passes cpu_run = run_cpu(c, GptOptions{}, params, batches, 0.5f);
  // Half the reference norm, so that clipping acts whatever this tiny model's norm is (it may be
  // below the usual 1.0).
  const double grad_clip = 0.5 * std::sqrt(cpu::sum_of_squares(cpu_run.grads.data(), n));

  CudaGpt<float> model(ctx, c.shape, c.B, Recompute::none);
  DeviceBuffer<float> master(params), grads(std::vector<float>(n, 0.0f)),
      m(std::vector<float>(n, 0.0f)), v(std::vector<float>(n, 0.0f));
  for (const Batch& b : batches)
    model.forward_backward(master.get(), grads.get(), b.tokens.data(), b.targets.data(), c.B, c.T,
                           0.5f);
  DeviceArena scratch(1 << 20);
  DeviceBuffer<double> sum(1);
  DeviceBuffer<float> scale(1);
  sum_of_squares(sum.get(), grads.get(), n, scratch, ctx.stream());
  gradient_scale_from_norm(scale.get(), sum.get(), 1.0f, static_cast<float>(grad_clip),
                           ctx.stream());
  const DeviceRanges decay(layout.decayed_ranges());
  adamw_update<float>(master.get(), nullptr, grads.get(), m.get(), v.get(), n, 0, decay,
                      first_step(kWeightDecay, 1.0f), scale.get(), ctx.stream());
  const std::vector<float> device_grads = grads.download(), got = master.download();

  // The model's accumulated gradients.
  expect_gradients_near(layout, device_grads, cpu_run.grads, kFp32Tolerance, c.name());
  // The device optimizer against the CPU one on the same (device) gradients. At step 1 the update
  // is lr·(g/(|g| + eps) + wd·p) ≈ lr·sign(g) + lr·wd·p: params barely depend on the clip factor,
  // m = (1−β1)·clip·g does (1e-5). Params agree to a few ulps of the update; 1e-6 still sees a
  // missing weight decay (lr·wd = 1e-4 of each decayed weight).
  std::vector<float> want_same_grads = params, want_m;
  cpu_first_step(layout, want_same_grads, device_grads, want_m, grad_clip);
  EXPECT_LT(relative_error(m.download(), want_m), kFp32Tolerance);
  EXPECT_LT(relative_error(got, want_same_grads), 1e-6);
  // End to end against the CPU path. An element whose gradient is within rounding of 0 may take
  // the other sign: 2·lr in one element, ≈ 1.1e-4 of ‖params‖ here (≈ 19, mostly the LayerNorm
  // weights), so 1e-4 would fail on a single such flip; 3e-4 allows a few.
  std::vector<float> want = params, unused_m;
  cpu_first_step(layout, want, cpu_run.grads, unused_m, grad_clip);
  EXPECT_LT(relative_error(got, want), 3e-4);
}

// Evaluation: without targets the logits (B·T, Vp, padded columns included) are left in logits();
// with targets the losses. B below max_batch, as for a last, short evaluation batch.
TEST(CudaGpt, Fp32EvalForwardMatchesCpu) {
  auto rng = test_rng();
  DeviceContext ctx;
  for (const Case& c : {cases()[0], cases()[2]}) {
    const std::vector<float> params = random_parameters(c.shape, rng);
    const Batch batch = random_batch(c, rng);
    const std::size_t rows = static_cast<std::size_t>(c.B) * c.T;
    const std::size_t count = rows * c.shape.padded_vocab();
    Gpt<float> cpu_model(c.shape, c.B);
    CudaGpt<float> model(ctx, c.shape, c.B + 1, Recompute::none);
    DeviceBuffer<float> weights(params);

    cpu_model.forward(params.data(), batch.tokens.data(), nullptr, c.B, c.T);
    const std::vector<float> want_logits(cpu_model.logits(), cpu_model.logits() + count);
    model.forward(weights.get(), batch.tokens.data(), nullptr, c.B, c.T);
    EXPECT_LT(relative_error(download(model.logits(), count), want_logits), kFp32Tolerance)
        << c.name();

    const float want_loss =
        cpu_model.forward(params.data(), batch.tokens.data(), batch.targets.data(), c.B, c.T);
    const std::vector<float> want_losses(cpu_model.losses(), cpu_model.losses() + rows);
    model.forward(weights.get(), batch.tokens.data(), batch.targets.data(), c.B, c.T);
    EXPECT_LT(relative_error(download(model.losses(), rows), want_losses), kFp32Tolerance)
        << c.name();
    EXPECT_NEAR(model.loss_sum() / rows, want_loss, kFp32Tolerance * want_loss) << c.name();
  }
}

// The mixture-of-experts model: 4 layers, blocks 1 and 3 with experts (test_experts()), 4 heads of
// 16, T 13 < seq_len 16 (capacity ceil(2·13/4) = 7 choices per expert and sequence), B·T = 39.
const Case& moe_case() {
  static const Case c{GptShape(4, 4, 64, 16, 100, test_experts()), 3, 13};
  return c;
}

// Its inputs, from a fixed seed rather than the test's name: every comparison with the CPU needs
// both sides to route every token alike, so no token's second and third probabilities may lie
// within the backends' fp32 differences (~1e-6). With seed 3 the smallest such gap over both
// micro-batches and both MoE blocks is 1.5e-3 on the CPU, and the capacity drops 120 of the 312
// choices (measured on the CPU model).
struct MoeInputs {
  std::vector<float> params;
  std::vector<Batch> batches;
};

MoeInputs moe_inputs() {
  constexpr std::uint64_t kSeed = 3;
  const Case& c = moe_case();
  std::mt19937_64 rng(kSeed);
  MoeInputs in;
  in.params = random_parameters(c.shape, rng);
  sharpen_routers(c.shape, in.params);
  in.batches = random_batches(2, c.shape.vocab_size, static_cast<std::size_t>(c.B) * c.T, rng);
  return in;
}

// Two accumulated micro-batches at loss scale 0.5, as Fp32LossesAndGradientsMatchCpu: the router
// losses' gradients must take the scale too. Losses, router losses and every gradient (the
// routers' and each expert's four tensors among them) to the fp32 bound; the routing exactly.
TEST(CudaGptMoe, Fp32LossesAndGradientsMatchCpu) {
  DeviceContext ctx;
  const Case& c = moe_case();
  const MoeInputs in = moe_inputs();
  const Passes want = run_cpu(c, GptOptions{}, in.params, in.batches, 0.5f);
  const Passes got = run_device<float>(ctx, c, Recompute::none, in.params, in.batches, 0.5f);
  ASSERT_FALSE(want.moe_totals.empty());
  double dropped = 0;
  const std::size_t stride = MoeTotals::stride(c.shape.moe.experts);
  for (int l = 0; l < c.shape.n_layer; ++l)
    dropped += want.moe_totals[static_cast<std::size_t>(l) * stride + MoeTotals::dropped];
  EXPECT_GT(dropped, 0) << "the capacity should drop some choices";
  EXPECT_GT(want.moe_loss[0], 0) << "both router losses are on";
  expect_run_near(got, want, c, kFp32Tolerance, kFp32Tolerance);
}

template <class T>
class CudaGptMoeRecompute : public ::testing::Test {};
TYPED_TEST_SUITE(CudaGptMoeRecompute, RecomputeDtypes, DtypeName);

// The experts' activations stay in the slot under every mode; a full recompute reruns the MoE
// forward into them (routing, its host synchronisation and the capacity rule included) before the
// block's backward. The same bits in every mode.
TYPED_TEST(CudaGptMoeRecompute, SelectiveAndFullAreBitwiseNone) {
  using T = TypeParam;
  DeviceContext ctx;
  const Case& c = moe_case();
  MoeInputs in = moe_inputs();
  in.params = rounded<T>(in.params);
  std::size_t bytes_none = 0, bytes_full = 0;
  const Passes none =
      run_device<T>(ctx, c, Recompute::none, in.params, in.batches, 0.5f, &bytes_none);
  const Passes selective = run_device<T>(ctx, c, Recompute::selective, in.params, in.batches, 0.5f);
  const Passes full =
      run_device<T>(ctx, c, Recompute::full, in.params, in.batches, 0.5f, &bytes_full);
  expect_recompute_bitwise(c, none, selective, full);
  EXPECT_GT(bytes_none, bytes_full) << c.name();
}

// Evaluation: B below max_batch (MoE activations sized for more tokens than it routes), losses and
// router losses as the CPU's; an evaluation forward is not counted in the routing figures.
TEST(CudaGptMoe, Fp32EvalForwardMatchesCpu) {
  DeviceContext ctx;
  const Case& c = moe_case();
  const MoeInputs in = moe_inputs();
  const Batch& batch = in.batches[0];
  const std::size_t rows = static_cast<std::size_t>(c.B) * c.T;
  Gpt<float> cpu_model(c.shape, c.B);
  CudaGpt<float> model(ctx, c.shape, c.B + 1, Recompute::none);
  DeviceBuffer<float> weights(in.params);
  const float want_loss =
      cpu_model.forward(in.params.data(), batch.tokens.data(), batch.targets.data(), c.B, c.T);
  const std::vector<float> want_losses(cpu_model.losses(), cpu_model.losses() + rows);
  model.forward(weights.get(), batch.tokens.data(), batch.targets.data(), c.B, c.T);
  EXPECT_LT(relative_error(download(model.losses(), rows), want_losses), kFp32Tolerance);
  EXPECT_NEAR(model.loss_sum() / rows, want_loss, kFp32Tolerance * want_loss);
  EXPECT_NEAR(model.moe_loss(), cpu_model.moe_loss(), kFp32Tolerance * cpu_model.moe_loss());
  std::vector<double> totals;
  model.take_moe_totals(totals);
  for (double t : totals) EXPECT_EQ(t, 0.0) << "an evaluation forward counted in the totals";
}

}  // namespace
}  // namespace strata::cuda
