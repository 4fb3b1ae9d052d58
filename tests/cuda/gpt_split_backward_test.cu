// The CUDA model's split backward (model/gpt_cuda.h; docs/ARCHITECTURE.md §5, the split backward)
// against its fused backward, in fp32 and bf16, under every recomputation and under partitions:
// the whole model, two pipeline stages, tensor parallelism 2 without and with sequence
// parallelism (over two stages). Ranks are threads as in gpt_partition_test.cu. Two micro-batches
// go forward in their own slots; the fused run backs each up with backward, the split run with
// backward_input (B) of both micro-batches first and backward_weight (W) of both after, as a
// zero-bubble schedule does. The per-position losses, the gradient each stage hands to the
// previous one and every rank's parameter gradients must be bitwise equal: the halves are the
// fused backward's own kernel calls on the same values. Also: the slot state refuses a forward
// into a slot whose W is pending, a W without its B, and B on a model built without the stash.
//
// Status: written without a GPU (2026-11-27); has not run yet.
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
#include "tests/cuda/cuda_test_support.h"
#include "tests/cuda/gpt_test_support.h"
#include "tests/support/partition_support.h"
#include "tests/support/thread_group.h"

namespace strata::cuda {
namespace {

using namespace testing;
using strata::testing::slice_of;
using strata::testing::stage_partition;
using strata::testing::ThreadGroup;
using strata::testing::ThreadRank;

// As gpt_partition_test.cu: 3 layers, 4 heads of 16, T 9, vocabulary 37 padded to 128.
const GptShape kShape{3, 4, 64, 9, 37};
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
};

template <class T>
Result run(const Layout& layout, Recompute recompute, bool split, const std::vector<float>& params,
           const std::vector<Batch>& batches) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kShape);
  const int stages = static_cast<int>(layout.stage_layers.size());
  const int T_ = kShape.seq_len, C = kShape.d_model;
  struct Rank {
    std::unique_ptr<ThreadRank> comm;
    std::unique_ptr<DeviceContext> ctx;
    std::unique_ptr<CudaGpt<T>> model;
    std::unique_ptr<DeviceBuffer<T>> weights;
    std::unique_ptr<DeviceBuffer<float>> grads;
    std::unique_ptr<FlatParameters<T, float>> parameters;
  };
  std::vector<std::unique_ptr<ThreadGroup>> groups;
  std::vector<std::vector<Rank>> ranks(stages);  // [stage][tp rank]
  for (int s = 0; s < stages; ++s) {
    groups.push_back(std::make_unique<ThreadGroup>(layout.tp));
    for (int r = 0; r < layout.tp; ++r) {
      const ModelPartition p =
          stage_partition(layout.stage_layers, s, r, layout.tp, layout.sequence_parallel);
      Rank rank;
      rank.comm = std::make_unique<ThreadRank>(*groups[s], r);
      rank.ctx = std::make_unique<DeviceContext>(0);
      rank.model = std::make_unique<CudaGpt<T>>(*rank.ctx, kShape, p, rank.comm.get(), kBatch,
                                                kMicroBatches, recompute, nullptr, split);
      const ParameterLayout& part = rank.model->layout();
      rank.weights = std::make_unique<DeviceBuffer<T>>(to_dtype<T>(slice_of(whole, part, params)));
      rank.grads = std::make_unique<DeviceBuffer<float>>(std::vector<float>(part.total(), 0.0f));
      rank.parameters = std::make_unique<FlatParameters<T, float>>(
          rank.model->segments(), rank.weights->get(), rank.grads->get());
      ranks[s].push_back(std::move(rank));
    }
  }
  const std::size_t boundary =
      static_cast<std::size_t>(ranks[0][0].model->activation_rows(kBatch, T_)) * C;
  Result result;
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int s = 0; s < stages; ++s)
      groups[s]->run([&](int r) {
        Rank& me = ranks[s][r];
        if (s > 0)
          STRATA_CUDA_CHECK(
              cudaMemcpyAsync(me.model->stage_input(mb), ranks[s - 1][r].model->stage_output(mb),
                              boundary * sizeof(T), cudaMemcpyDeviceToDevice, me.ctx->stream()));
        me.model->forward(mb, *me.parameters, batches[mb].tokens.data(), batches[mb].targets.data(),
                          kBatch, T_);
        me.ctx->synchronize();
      });
    const std::size_t rows = static_cast<std::size_t>(kBatch) * T_;
    result.losses.push_back(download(ranks[stages - 1][0].model->losses(mb), rows));
  }
  // B (or the fused backward) of every micro-batch, then (split) W of every micro-batch.
  result.input_grads.resize(static_cast<std::size_t>(stages * layout.tp * kMicroBatches));
  for (int mb = 0; mb < kMicroBatches; ++mb)
    for (int s = stages - 1; s >= 0; --s)
      groups[s]->run([&](int r) {
        Rank& me = ranks[s][r];
        if (s < stages - 1)
          STRATA_CUDA_CHECK(cudaMemcpyAsync(
              me.model->stage_output_grad(), ranks[s + 1][r].model->stage_input_grad(),
              boundary * sizeof(T), cudaMemcpyDeviceToDevice, me.ctx->stream()));
        if (split)
          me.model->backward_input(mb, *me.parameters, 1.0f);
        else
          me.model->backward(mb, *me.parameters, 1.0f);
        me.ctx->synchronize();
        if (s > 0)
          result.input_grads[static_cast<std::size_t>((s * layout.tp + r) * kMicroBatches + mb)] =
              to_floats(download(me.model->stage_input_grad(), boundary));
      });
  if (split)
    for (int mb = 0; mb < kMicroBatches; ++mb)
      for (int s = stages - 1; s >= 0; --s)
        groups[s]->run([&](int r) {
          ranks[s][r].model->backward_weight(mb, *ranks[s][r].parameters);
          ranks[s][r].ctx->synchronize();
        });
  for (int s = 0; s < stages; ++s)
    for (int r = 0; r < layout.tp; ++r) result.grads.push_back(ranks[s][r].grads->download());
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
class GptSplitBackward : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng = test_rng();
    params_ = random_parameters(kShape, rng);
    for (int mb = 0; mb < kMicroBatches; ++mb)
      batches_.push_back(
          random_batch(kShape.vocab_size, static_cast<std::size_t>(kBatch) * kShape.seq_len, rng));
  }

  std::vector<float> params_;
  std::vector<Batch> batches_;
};

using SplitDtypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(GptSplitBackward, SplitDtypes, DtypeName);

TYPED_TEST(GptSplitBackward, IsBitwiseTheFusedBackward) {
  for (const Layout& layout : kLayouts)
    for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
      SCOPED_TRACE(layout.name() + " recompute " + std::to_string(static_cast<int>(recompute)));
      const Result fused = run<TypeParam>(layout, recompute, false, this->params_, this->batches_);
      const Result split = run<TypeParam>(layout, recompute, true, this->params_, this->batches_);
      expect_bitwise(split.losses, fused.losses, "losses of micro-batch");
      expect_bitwise(split.input_grads, fused.input_grads, "input gradient (stage, rank, mb)");
      expect_bitwise(split.grads, fused.grads, "parameter gradients of (stage, rank)");
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
