// The CUDA mixture-of-experts MLP (model/moe/moe_layer_cuda.h) against the CPU reference
// (model/moe/moe_layer.h) on the same inputs: the choices, the kept assignments and the stats
// (tokens per expert, dropped choices) exactly; the output y, the router losses, the input
// gradient dx and every weight gradient (the router, and each expert's four tensors) to the
// tolerances of cuda_test_support.h. Cases: top-2 and top-1, dropless and capped (tokens
// dropped), several capacity groups and a group count that does not divide the micro-batch, 4 and
// 8 experts, a row width that is not a multiple of 8 elements, the weight gradients of a rank
// that owns the second half of the rows (sequence parallelism), and experts other than GPT-2's:
// SwiGLU experts (fc the fused gate and up projections, swiglu_forward between fc and proj) with
// and without biases, GELU experts of a width other than 4C without biases. fp32 against
// MoeLayer<float>; bf16 and fp16 against MoeLayer<float> emulating the dtype's rounding. Expert
// parallelism: two ranks (threads, each with its own context on the device) holding two halves of
// the experts and exchanging their rows through the host compute, for each rank's tokens, what the
// whole CPU layer computes for them (y, dx, routing, the router's gradient), each expert's gradient
// the sum of the whole layer's over both ranks' tokens.
//
// The comparison of choices is exact only if no token's k-th and (k+1)-th probabilities are
// within the two sides' rounding differences (~1e-7: both compute the router in fp32 from the
// same values). Each case's seed was picked so that the smallest gap, in every dtype, is above
// 2e-3; the tests check it is above kRoutingMargin (InputsStayClearOfRoutingBoundaries on the CPU
// alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "model/kernels/cpu/precision.h"
#include "model/moe/moe_layer.h"
#include "model/moe/moe_layer_cuda.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/support/thread_group.h"

namespace strata::cuda {
namespace {

using namespace testing;
using strata::testing::ThreadGroup;
using strata::testing::ThreadRank;

constexpr double kRoutingMargin = 1e-4;
// Scales only the router losses' gradients (dy is the caller's, already scaled): not 1, so a
// missing scale shows.
constexpr float kLossScale = 2.0f;

struct MoeCase {
  const char* name;
  int experts, top_k;
  double capacity_factor;
  int group_sequences;
  int batch, seq_len, d_model;
  // backward_weight as a rank whose own rows are the second half (sequence parallelism): the
  // router over those rows, the proj biases not at all (the rank owning row 0 counts them)
  bool own_half;
  std::uint64_t seed;
  // The experts' MLP: GPT-2's (GELU of 4C with biases) by default.
  int d_ff = 0;  // 0: 4C
  bool swiglu = false;
  bool bias = true;

  MoeExpertShape expert_shape() const {
    return {d_model, d_ff > 0 ? d_ff : 4 * d_model, swiglu, bias};
  }
  MoeWeightOffsets offsets(int held = 0) const {
    return MoeWeightOffsets::of(expert_shape(), 1, experts, held);
  }
  int tokens() const { return batch * seq_len; }
  int own_begin() const { return own_half ? tokens() / 2 : 0; }
  int own_count() const { return tokens() - own_begin(); }
  MoeConfig config() const {
    MoeConfig c;
    c.experts = experts;
    c.top_k = top_k;
    c.capacity_factor = capacity_factor;
    c.group_sequences = group_sequences;
    c.aux_loss = 0.3;  // large enough that both losses' gradients matter
    c.z_loss = 0.2;
    return c;
  }
};

// Capacity per group: capped_e8 ceil(0.5·2·16/8) = 2, top1_capped ceil(0.75·16/8) = 2,
// groups ceil(1.0·2·32/8) = 8 in each of two groups of 2 sequences, one_group (3 sequences per
// group do not divide 4: one group of 32 tokens) ceil(1.0·2·32/4) = 16. The cases of other
// experts repeat a GPT-2 case's sizes and seed: the router's inputs are drawn first, so their
// routing (and its margins) is that case's.
const MoeCase kCases[] = {
    {"top2_dropless_e4", 4, 2, 0.0, 1, 4, 16, 32, false, 5},
    {"top1_dropless_e4", 4, 1, 0.0, 1, 4, 16, 32, false, 23},
    {"top2_capped_e8", 8, 2, 0.5, 1, 4, 16, 32, false, 27},
    {"top1_capped_e8_c36", 8, 1, 0.75, 1, 4, 16, 36, false, 2},
    {"top2_groups_e8_own_half", 8, 2, 1.0, 2, 4, 16, 32, true, 33},
    {"top2_one_group_e4_c36", 4, 2, 1.0, 3, 4, 8, 36, false, 34},
    {"swiglu_f40_no_bias_top2_capped_e8", 8, 2, 0.5, 1, 4, 16, 32, false, 27, 40, true, false},
    {"swiglu_f48_top2_groups_e8_own_half", 8, 2, 1.0, 2, 4, 16, 32, true, 33, 48, true, true},
    {"gelu_f72_no_bias_top1_dropless_e4", 4, 1, 0.0, 1, 4, 16, 32, false, 23, 72, false, false},
};

// Inputs in fp32, rounded to the compute dtype (the values a T buffer holds).
struct MoeInputs {
  std::vector<float> x, weights, dy;
  std::vector<float> dweights;  // the gradients before backward_weight adds to them
};

MoeInputs make_inputs(const MoeCase& c, cpu::ComputeDtype dtype) {
  const MoeWeightOffsets at = c.offsets();
  const std::size_t rows = static_cast<std::size_t>(c.tokens()) * c.d_model;
  std::mt19937_64 rng(c.seed);
  MoeInputs in;
  in.x = random_floats(rows, rng);
  // Router logits of spread ~1 (p far from uniform), expert weights small as at initialisation.
  in.weights = random_floats(at.total(), rng, -0.2f, 0.2f);
  for (std::size_t i = 0; i < at.expert(0); ++i) in.weights[i] *= 2.5f;
  in.dy = random_floats(rows, rng);
  in.dweights = random_floats(at.total(), rng, -0.01f, 0.01f);
  for (std::vector<float>* v : {&in.x, &in.weights, &in.dy})
    cpu::round_to_dtype(v->data(), static_cast<long>(v->size()), dtype);
  return in;
}

// One forward and backward of the layer: y, dx and what backward_weight added to the gradients.
struct LayerRun {
  std::vector<float> y, dx, dweights;
  double loss = 0;
  MoeStats stats;
  MoeRouting routing;
};

std::vector<float> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> d(after.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

// The smallest gap, over the tokens, between the k-th and the (k+1)-th largest probability.
double routing_margin(const std::vector<float>& probs, int N, int E, int k) {
  double margin = std::numeric_limits<double>::infinity();
  if (k == E) return margin;
  for (int t = 0; t < N; ++t) {
    std::vector<float> p(probs.begin() + static_cast<long>(t) * E,
                         probs.begin() + static_cast<long>(t + 1) * E);
    std::sort(p.begin(), p.end(), [](float a, float b) { return a > b; });
    margin = std::min(margin, static_cast<double>(p[static_cast<std::size_t>(k) - 1]) -
                                  p[static_cast<std::size_t>(k)]);
  }
  return margin;
}

LayerRun run_cpu(const MoeCase& c, const MoeInputs& in, cpu::ComputeDtype dtype,
                 double* margin = nullptr) {
  const int N = c.tokens();
  MoeLayer<float> layer(c.expert_shape(), c.config(), nullptr, dtype);
  MoeActivations<float> a;
  LayerRun run;
  run.y.resize(in.x.size());
  run.dx.resize(in.x.size());
  layer.forward(a, in.x.data(), N, c.seq_len, in.weights.data(), run.y.data());
  run.loss = layer.loss(a);
  layer.backward_input(a, in.dy.data(), kLossScale, in.weights.data(), run.dx.data());
  std::vector<float> dweights = in.dweights;
  layer.backward_weight(a, dweights.data(), c.own_begin(), c.own_count());
  run.dweights = added(dweights, in.dweights);
  run.stats = a.stats;
  run.routing = a.routing;
  if (margin != nullptr) *margin = routing_margin(a.probs, N, c.experts, c.top_k);
  return run;
}

template <class T>
LayerRun run_device(DeviceContext& ctx, const MoeCase& c, const MoeInputs& in) {
  const int N = c.tokens();
  DeviceArena scratch(std::size_t{64} << 20);
  CudaMoeLayer<T> layer(ctx, scratch, c.expert_shape(), c.config());
  DeviceArena arena(layer.activation_bytes(N));
  CudaMoeActivations<T> a = layer.activations(arena, N);
  EXPECT_EQ(arena.used(), layer.activation_bytes(N)) << c.name;
  DeviceBuffer<T> x(to_dtype<T>(in.x)), weights(to_dtype<T>(in.weights)), dy(to_dtype<T>(in.dy));
  DeviceBuffer<T> y(in.x.size()), dx(in.x.size());
  DeviceBuffer<float> dweights(in.dweights);
  LayerRun run;
  layer.forward(a, x.get(), N, c.seq_len, weights.get(), y.get());
  run.loss = layer.loss(a);
  layer.backward_input(a, dy.get(), kLossScale, weights.get(), dx.get());
  layer.backward_weight(a, dweights.get(), c.own_begin(), c.own_count());
  run.y = to_floats(y.download());
  run.dx = to_floats(dx.download());
  run.dweights = added(dweights.download(), in.dweights);
  run.stats = a.stats;
  run.routing = a.routing;
  EXPECT_EQ(scratch.used(), 0u) << c.name;
  EXPECT_LE(scratch.peak(), layer.scratch_bytes(N)) << c.name;
  return run;
}

// The same experts chosen and the same choices dropped: exact.
void expect_same_routing(const LayerRun& got, const LayerRun& want, const MoeCase& c) {
  EXPECT_EQ(got.routing.expert, want.routing.expert) << c.name << ": choices";
  EXPECT_EQ(got.routing.kept, want.routing.kept) << c.name << ": kept choices";
  EXPECT_EQ(got.routing.assignments, want.routing.assignments) << c.name;
  EXPECT_EQ(got.stats.tokens_per_expert, want.stats.tokens_per_expert) << c.name;
  EXPECT_EQ(got.stats.dropped, want.stats.dropped) << c.name;
  EXPECT_EQ(got.stats.choices, want.stats.choices) << c.name;
  if (c.capacity_factor > 0)
    EXPECT_GT(want.stats.dropped, 0) << c.name << ": the case should drop choices";
  else
    EXPECT_EQ(want.stats.dropped, 0) << c.name;
}

std::vector<float> part(const std::vector<float>& v, std::size_t begin, std::size_t count) {
  return std::vector<float>(v.begin() + static_cast<long>(begin),
                            v.begin() + static_cast<long>(begin + count));
}

// `losses`: the router's, fp32 on both sides from the same values. `values`: y and dx.
// `gradients`: per weight tensor.
void expect_run_near(const LayerRun& got, const LayerRun& want, const MoeCase& c, double losses,
                     double values, double gradients) {
  EXPECT_NEAR(got.stats.aux, want.stats.aux, losses * std::abs(want.stats.aux)) << c.name;
  EXPECT_NEAR(got.stats.z, want.stats.z, losses * std::abs(want.stats.z)) << c.name;
  EXPECT_NEAR(got.loss, want.loss, losses * std::abs(want.loss)) << c.name;
  EXPECT_LT(relative_error(got.y, want.y), values) << c.name << ": y";
  EXPECT_LT(relative_error(got.dx, want.dx), values) << c.name << ": dx";
  const std::size_t C = static_cast<std::size_t>(c.d_model);
  const MoeWeightOffsets at = c.offsets();
  ASSERT_EQ(got.dweights.size(), at.total());
  ASSERT_EQ(want.dweights.size(), at.total());
  auto expect_tensor = [&](std::size_t offset, std::size_t count, const std::string& name) {
    EXPECT_LT(relative_error(part(got.dweights, offset, count), part(want.dweights, offset, count)),
              gradients)
        << c.name << ": " << name;
  };
  expect_tensor(at.router(), at.E * C, "router.weight");
  for (int e = 0; e < c.experts; ++e) {
    const std::string expert = "expert " + std::to_string(e);
    expect_tensor(at.fc_weight(e), at.Fc * C, expert + " fc.weight");
    expect_tensor(at.proj_weight(e), C * at.H, expert + " proj.weight");
    if (!at.has_bias) continue;
    expect_tensor(at.fc_bias(e), at.Fc, expert + " fc.bias");
    expect_tensor(at.proj_bias(e), C, expert + " proj.bias");
  }
}

// The precondition of the exact comparisons, on the CPU alone.
TEST(CudaMoeLayer, InputsStayClearOfRoutingBoundaries) {
  for (const cpu::ComputeDtype dtype :
       {cpu::ComputeDtype::fp32, cpu::ComputeDtype::bf16, cpu::ComputeDtype::fp16})
    for (const MoeCase& c : kCases) {
      double margin = 0;
      run_cpu(c, make_inputs(c, dtype), dtype, &margin);
      EXPECT_GT(margin, kRoutingMargin) << c.name << " " << cpu::compute_dtype_name(dtype);
    }
}

TEST(CudaMoeLayer, Fp32MatchesCpu) {
  DeviceContext ctx;
  for (const MoeCase& c : kCases) {
    const MoeInputs in = make_inputs(c, cpu::ComputeDtype::fp32);
    double margin = 0;
    const LayerRun want = run_cpu(c, in, cpu::ComputeDtype::fp32, &margin);
    ASSERT_GT(margin, kRoutingMargin) << c.name;
    const LayerRun got = run_device<float>(ctx, c, in);
    expect_same_routing(got, want, c);
    expect_run_near(got, want, c, kFp32Tolerance, kFp32Tolerance, kFp32Tolerance);
  }
}

// Every kernel has one writer per element and fixed sums, the per-expert GEMMs the same plans:
// a second run is bitwise the first.
TEST(CudaMoeLayer, RepeatsBitwise) {
  DeviceContext ctx;
  const MoeCase& c = kCases[4];  // capped, two groups, half the tokens owned
  const MoeInputs in = make_inputs(c, cpu::ComputeDtype::fp32);
  const LayerRun first = run_device<float>(ctx, c, in);
  const LayerRun second = run_device<float>(ctx, c, in);
  EXPECT_EQ(first.y, second.y);
  EXPECT_EQ(first.dx, second.dx);
  EXPECT_EQ(first.dweights, second.dweights);
  EXPECT_EQ(first.stats.aux, second.stats.aux);
  EXPECT_EQ(first.stats.z, second.stats.z);
}

// Expert parallelism of 2 in fp32: rank 0 trains the case's tokens, rank 1 the same tokens in
// reverse order (other capacity claims, the same routing margins), each with the router and its
// half of the experts: GPT-2's, dropless and capped, and SwiGLU experts without biases, capped.
TEST(CudaMoeLayer, ExpertParallelRanksComputeTheWholeLayerForTheirTokens) {
  constexpr int kRanks = 2;
  for (const MoeCase& c : {kCases[0], kCases[2], kCases[6]}) {
    const int N = c.tokens(), held = c.experts / kRanks;
    const std::size_t C = static_cast<std::size_t>(c.d_model);
    const MoeWeightOffsets whole = c.offsets(), mine = c.offsets(held);
    std::vector<MoeInputs> inputs(kRanks, make_inputs(c, cpu::ComputeDtype::fp32));
    auto reversed = [&](const std::vector<float>& rows) {
      std::vector<float> out(rows.size());
      for (int t = 0; t < N; ++t)
        std::copy_n(rows.begin() + static_cast<long>(t * C), C,
                    out.begin() + static_cast<long>((N - 1 - t) * C));
      return out;
    };
    inputs[1].x = reversed(inputs[0].x);
    inputs[1].dy = reversed(inputs[0].dy);
    std::vector<LayerRun> want;
    for (const MoeInputs& in : inputs) {
      double margin = 0;
      want.push_back(run_cpu(c, in, cpu::ComputeDtype::fp32, &margin));
      ASSERT_GT(margin, kRoutingMargin) << c.name;
    }
    std::vector<LayerRun> got(kRanks);
    ThreadGroup group(kRanks);
    group.run([&](int rank) {
      ThreadRank ep(group, rank);
      const MoeInputs& in = inputs[static_cast<std::size_t>(rank)];
      // The router and experts [rank·held, (rank + 1)·held) of the whole layer's weights.
      std::vector<float> weights(in.weights.begin(),
                                 in.weights.begin() + static_cast<long>(whole.expert(0)));
      weights.insert(weights.end(),
                     in.weights.begin() + static_cast<long>(whole.expert(rank * held)),
                     in.weights.begin() + static_cast<long>(whole.expert((rank + 1) * held)));
      DeviceContext ctx;
      DeviceArena scratch(std::size_t{64} << 20);
      CudaMoeLayer<float> layer(ctx, scratch, c.expert_shape(), c.config(), nullptr, &ep);
      EXPECT_EQ(layer.offsets().total(), mine.total());
      DeviceArena arena(layer.activation_bytes(N));
      CudaMoeActivations<float> a = layer.activations(arena, N);
      DeviceBuffer<float> x(in.x), w(weights), dy(in.dy), y(in.x.size()), dx(in.x.size());
      DeviceBuffer<float> dweights(std::vector<float>(mine.total(), 0.0f));
      LayerRun& run = got[static_cast<std::size_t>(rank)];
      layer.forward(a, x.get(), N, c.seq_len, w.get(), y.get());
      run.loss = layer.loss(a);
      layer.backward_input(a, dy.get(), kLossScale, w.get(), dx.get());
      layer.backward_weight(a, dweights.get(), 0, N);
      run.y = y.download();
      run.dx = dx.download();
      run.dweights = dweights.download();
      run.stats = a.stats;
      run.routing = a.routing;
      EXPECT_EQ(scratch.used(), 0u) << c.name;
      EXPECT_LE(scratch.peak(), layer.scratch_bytes(N)) << c.name;
    });
    for (int rank = 0; rank < kRanks; ++rank) {
      const std::string where = std::string(c.name) + " rank " + std::to_string(rank);
      const LayerRun& g = got[static_cast<std::size_t>(rank)];
      const LayerRun& w = want[static_cast<std::size_t>(rank)];
      EXPECT_EQ(g.routing.assignments, w.routing.assignments) << where;
      EXPECT_EQ(g.stats.tokens_per_expert, w.stats.tokens_per_expert) << where;
      EXPECT_EQ(g.stats.dropped, w.stats.dropped) << where;
      EXPECT_GT(g.stats.exchanged_rows, 0) << where;
      EXPECT_NEAR(g.loss, w.loss, kFp32Tolerance * std::abs(w.loss)) << where;
      EXPECT_LT(relative_error(g.y, w.y), kFp32Tolerance) << where << ": y";
      EXPECT_LT(relative_error(g.dx, w.dx), kFp32Tolerance) << where << ": dx";
      ASSERT_EQ(g.dweights.size(), mine.total()) << where;
      EXPECT_LT(relative_error(part(g.dweights, 0, whole.expert(0)),
                               part(w.dweights, 0, whole.expert(0))),
                kFp32Tolerance)
          << where << ": router.weight";
      for (int j = 0; j < held; ++j) {
        const int e = rank * held + j;
        std::vector<float> summed(whole.expert_size(), 0.0f);
        for (const LayerRun& r : want)
          for (std::size_t i = 0; i < summed.size(); ++i)
            summed[i] += r.dweights[whole.expert(e) + i];
        EXPECT_LT(relative_error(part(g.dweights, mine.expert(j), mine.expert_size()), summed),
                  kFp32Tolerance)
            << where << ": expert " << e;
      }
    }
  }
}

template <class T>
class CudaMoeLayerReduced : public ::testing::Test {};
using ReducedDtypes = ::testing::Types<__nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudaMoeLayerReduced, ReducedDtypes, DtypeName);

// Against the CPU emulating the dtype's rounding, from the same rounded inputs. The router is fp32
// on both sides (losses to kFp32Tolerance). The rest differs where one side rounds an intermediate
// the other keeps: the fc GEMM's fused GELU and the proj input gradient's fused GELU derivative
// (as in CudaGpt's MLP). y is one expert GEMM chain and a rounding away from those: tolerance<T>().
// dx and the gradients stack the backward's roundings on the forward's (dout, dpre, dxe, dx, and
// the gates' gradient through the softmax's backward), ~6 roundings of ~2^-9/√3 rms each in bf16:
// 3 × tolerance<T>() (bf16 3e-2, fp16 1.5e-2).
TYPED_TEST(CudaMoeLayerReduced, MatchesEmulatingCpu) {
  using T = TypeParam;
  const cpu::ComputeDtype dtype =
      std::is_same_v<T, __half> ? cpu::ComputeDtype::fp16 : cpu::ComputeDtype::bf16;
  DeviceContext ctx;
  for (const MoeCase& c : kCases) {
    const MoeInputs in = make_inputs(c, dtype);
    double margin = 0;
    const LayerRun want = run_cpu(c, in, dtype, &margin);
    ASSERT_GT(margin, kRoutingMargin) << c.name;
    const LayerRun got = run_device<T>(ctx, c, in);
    expect_same_routing(got, want, c);
    EXPECT_LT(relative_error(got.y, want.y), tolerance<T>()) << c.name << ": y";
    expect_run_near(got, want, c, kFp32Tolerance, 3 * tolerance<T>(), 3 * tolerance<T>());
  }
}

}  // namespace
}  // namespace strata::cuda
