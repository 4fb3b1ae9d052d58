// The CUDA model's split backward (model/gpt_cuda.h; docs/ARCHITECTURE.md §5, the split backward)
// against its fused backward, in fp32 and bf16, under every recomputation and under partitions:
// the whole model, two pipeline stages, tensor parallelism 2 without and with sequence
// parallelism (over two stages). Ranks are threads (tests/cuda/gpt_partition_ranks.h). Two
// micro-batches go forward in their own slots; the fused run backs each up with backward, the split
// run with backward_input (B) of both micro-batches first and backward_weight (W) of both after, as
// a zero-bubble schedule does. The per-position losses, the gradient each stage hands to the
// previous one and every rank's parameter gradients must be bitwise equal: the halves are the
// fused backward's own kernel calls on the same values. The same for a model with a
// mixture-of-experts block (test_experts(): block 1 of 3), whose backward_weight reads the experts'
// activation gradients its backward_input left in the slot, and under a full recompute the copy of
// the block's LayerNorm output in the stash (the workspace holding another layer by then); its
// router losses and routing figures must be bitwise equal too. Also: the slot state refuses a
// forward into a slot whose W is pending, a W without its B, and B on a model built without the
// stash.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/gpt.h"
#include "model/gpt_cuda.h"
#include "model/kernels/cuda/device_context.h"
#include "model/parameter_access.h"
#include "model/recompute.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/cuda/gpt_partition_ranks.h"
#include "tests/cuda/gpt_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

// As gpt_partition_test.cu: 3 layers, 4 heads of 16, T 9, vocabulary 37 padded to 128; and the
// same with experts in block 1 (the MoE block in the first stage of {0, 2}, {2, 3} and in the
// second of {0, 1}, {1, 3}).
const GptShape kShape{3, 4, 64, 9, 37};
const GptShape kMoeShape{3, 4, 64, 9, 37, test_experts()};
constexpr int kBatch = 4;  // B·T = 36 rows: divisible by tp 2 (sequence parallelism)
constexpr int kMicroBatches = 2;

struct Layout {
  int tp = 1;
  bool sequence_parallel = false;
  std::vector<std::pair<int, int>> stage_layers{{0, 3}};  // [begin, end) per stage
  std::string name() const {
    std::string n = "tp" + std::to_string(tp) + " stages " + std::to_string(stage_layers.size());
    return sequence_parallel ? n + " sp" : n;
  }
};

const std::vector<Layout> kLayouts = {
    {}, {1, false, {{0, 2}, {2, 3}}}, {2, false, {{0, 3}}}, {2, true, {{0, 1}, {1, 3}}}};

// Everything a backward hands out, as the floats the device arrays hold (exact from T).
struct Result {
  std::vector<std::vector<float>> losses;  // [micro-batch] per position
  std::vector<std::vector<float>>
      input_grads;                        // [(stage, rank, micro-batch)] stages after the first
  std::vector<std::vector<float>> grads;  // [(stage, rank)] the rank's gradient buffer
  // [(stage, rank)] the router losses of each micro-batch, then the routing figures (MoeTotals)
  std::vector<std::vector<double>> moe;
};

template <class T>
Result run(const GptShape& shape, const Layout& layout, Recompute recompute, bool split,
           const std::vector<float>& params, const std::vector<Batch>& batches) {
  PartitionedRanks<T> ranks(
      shape, {layout.tp, layout.sequence_parallel, layout.stage_layers, recompute, split}, kBatch,
      kMicroBatches, params);
  using Rank = typename PartitionedRanks<T>::Rank;
  const int stages = ranks.stages();
  Result result;
  for (int mb = 0; mb < kMicroBatches; ++mb)
    result.losses.push_back(ranks.forward(mb, batches[mb]));
  // B (or the fused backward) of every micro-batch, then (split) W of every micro-batch.
  result.input_grads.resize(static_cast<std::size_t>(stages * layout.tp * kMicroBatches));
  for (int mb = 0; mb < kMicroBatches; ++mb)
    for (int s = stages - 1; s >= 0; --s)
      ranks.run(s, [&](int r, Rank& me) {
        ranks.receive_output_grad(s, r);
        if (split)
          me.model->backward_input(mb, *me.parameters, 1.0f);
        else
          me.model->backward(mb, *me.parameters, 1.0f);
        if (s > 0)
          result.input_grads[static_cast<std::size_t>((s * layout.tp + r) * kMicroBatches + mb)] =
              to_floats(download(me.model->stage_input_grad(), ranks.boundary()));
      });
  if (split)
    for (int mb = 0; mb < kMicroBatches; ++mb)
      for (int s = stages - 1; s >= 0; --s)
        ranks.run(s, [&](int, Rank& me) { me.model->backward_weight(mb, *me.parameters); });
  for (int s = 0; s < stages; ++s)
    for (int r = 0; r < layout.tp; ++r) {
      result.grads.push_back(ranks.at(s, r).grads->download());
      CudaGpt<T>& model = *ranks.at(s, r).model;
      std::vector<double> moe;
      for (int mb = 0; mb < kMicroBatches; ++mb) moe.push_back(model.moe_loss(mb));
      model.take_moe_totals(moe);
      result.moe.push_back(moe);
    }
  return result;
}

// Bit for bit, and where the first difference is.
void expect_bitwise(const std::vector<std::vector<float>>& got,
                    const std::vector<std::vector<float>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << what << " " << i;
    for (std::size_t k = 0; k < got[i].size(); ++k)
      if (std::memcmp(&got[i][k], &want[i][k], sizeof(float)) != 0) {
        ADD_FAILURE() << what << " " << i << " differs first at element " << k << ": split "
                      << got[i][k] << ", fused " << want[i][k];
        break;
      }
  }
}

template <class T>
class GptSplitBackward : public ::testing::Test {};

using SplitDtypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(GptSplitBackward, SplitDtypes, DtypeName);

TYPED_TEST(GptSplitBackward, IsBitwiseTheFusedBackward) {
  std::mt19937_64 rng = test_rng();
  for (const GptShape& shape : {kShape, kMoeShape}) {
    std::vector<float> params = random_parameters(shape, rng);
    if (shape.moe.enabled()) sharpen_routers(shape, params);
    const std::vector<Batch> batches = random_batches(
        kMicroBatches, shape.vocab_size, static_cast<std::size_t>(kBatch) * shape.seq_len, rng);
    for (const Layout& layout : kLayouts)
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
        SCOPED_TRACE(std::string(shape.moe.enabled() ? "moe " : "") + layout.name() +
                     " recompute " + recompute_name(recompute));
        const Result fused = run<TypeParam>(shape, layout, recompute, false, params, batches);
        const Result split = run<TypeParam>(shape, layout, recompute, true, params, batches);
        expect_bitwise(split.losses, fused.losses, "losses of micro-batch");
        expect_bitwise(split.input_grads, fused.input_grads, "input gradient (stage, rank, mb)");
        expect_bitwise(split.grads, fused.grads, "parameter gradients of (stage, rank)");
        EXPECT_EQ(split.moe, fused.moe) << "router losses and routing figures";
      }
  }
}

TEST(GptSplitBackwardSlots, RefusesOutOfOrder) {
  DeviceContext ctx(0);
  const ModelPartition whole = ModelPartition::whole(kShape);
  CudaGpt<float> model(ctx, kShape, whole, nullptr, kBatch, kMicroBatches, Recompute::none, nullptr,
                       true);
  std::vector<float> params(model.layout().total(), 0.01f);
  DeviceBuffer<float> weights(params), grads(std::vector<float>(params.size(), 0.0f));
  FlatParameters<float, float> parameters(model.segments(), weights.get(), grads.get());
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(kBatch) * kShape.seq_len, 1);
  EXPECT_THROW(model.backward_weight(0, parameters), Error);  // no B yet
  model.forward(0, parameters, tokens.data(), tokens.data(), kBatch, kShape.seq_len);
  model.backward_input(0, parameters, 1.0f);
  EXPECT_THROW(model.forward(0, parameters, tokens.data(), tokens.data(), kBatch, kShape.seq_len),
               Error);  // W pending
  EXPECT_THROW(model.backward(0, parameters, 1.0f), Error);
  model.backward_weight(0, parameters);
  EXPECT_THROW(model.backward_weight(0, parameters), Error);
  model.forward(0, parameters, tokens.data(), tokens.data(), kBatch, kShape.seq_len);

  CudaGpt<float> fused_only(ctx, kShape, kBatch, Recompute::none);
  fused_only.forward(0, parameters, tokens.data(), tokens.data(), kBatch, kShape.seq_len);
  EXPECT_THROW(fused_only.backward_input(0, parameters, 1.0f), Error);
}

}  // namespace
}  // namespace strata::cuda
