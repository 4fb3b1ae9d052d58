// The ranks of a partitioned CUDA model (model/gpt_cuda.h), shared by the tests that run one:
// pipeline stages × tensor-parallel ranks, each rank a thread with its own device context on the
// one GPU and its collectives staged through the host over a thread group per stage
// (tests/support/thread_group.h). Stages hand their boundary arrays over on the device. Weights
// are the whole model's `params` cut to each rank's layout, stored in T; gradients start at zero.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "model/gpt_cuda.h"
#include "model/kernels/cuda/device_context.h"
#include "model/parameter_access.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/cuda/gpt_test_support.h"
#include "tests/support/partition_support.h"
#include "tests/support/thread_group.h"

namespace strata::cuda::testing {

struct PartitionLayout {
  int tp = 1;
  bool sequence_parallel = false;
  std::vector<std::pair<int, int>> stage_layers;  // [begin, end) per stage
  Recompute recompute = Recompute::none;
  bool split_backward = false;  // the models keep the split backward's weight stash
};

template <class T>
class PartitionedRanks {
 public:
  struct Rank {
    std::unique_ptr<strata::testing::ThreadRank> comm;
    std::unique_ptr<DeviceContext> ctx;
    std::unique_ptr<CudaGpt<T>> model;
    std::unique_ptr<DeviceBuffer<T>> weights;
    std::unique_ptr<DeviceBuffer<float>> grads;
    std::unique_ptr<FlatParameters<T, float>> parameters;
  };

  // Micro-batches of `batch` sequences of shape.seq_len, `slots` of them held at once.
  PartitionedRanks(const GptShape& shape, const PartitionLayout& layout, int batch, int slots,
                   const std::vector<float>& params)
      : shape_(shape), batch_(batch), ranks_(layout.stage_layers.size()) {
    const ParameterLayout whole = ParameterLayout::for_gpt(shape);
    for (int s = 0; s < stages(); ++s) {
      groups_.push_back(std::make_unique<strata::testing::ThreadGroup>(layout.tp));
      for (int r = 0; r < layout.tp; ++r) {
        const ModelPartition p = strata::testing::stage_partition(
            layout.stage_layers, s, r, layout.tp, layout.sequence_parallel);
        Rank rank;
        rank.comm = std::make_unique<strata::testing::ThreadRank>(*groups_[s], r);
        rank.ctx = std::make_unique<DeviceContext>(0);
        rank.model =
            std::make_unique<CudaGpt<T>>(*rank.ctx, shape, p, rank.comm.get(), batch, slots,
                                         layout.recompute, nullptr, layout.split_backward);
        const ParameterLayout& part = rank.model->layout();
        rank.weights = std::make_unique<DeviceBuffer<T>>(
            to_dtype<T>(strata::testing::slice_of(whole, part, params)));
        rank.grads = std::make_unique<DeviceBuffer<float>>(std::vector<float>(part.total(), 0.0f));
        rank.parameters = std::make_unique<FlatParameters<T, float>>(
            rank.model->segments(), rank.weights->get(), rank.grads->get());
        ranks_[static_cast<std::size_t>(s)].push_back(std::move(rank));
      }
    }
  }

  int stages() const { return static_cast<int>(ranks_.size()); }
  int tp() const { return static_cast<int>(ranks_[0].size()); }
  Rank& at(int stage, int tp_rank) {
    return ranks_[static_cast<std::size_t>(stage)][static_cast<std::size_t>(tp_rank)];
  }
  // Elements of a boundary array (the stage input, output and their gradients) of one rank.
  std::size_t boundary() {
    return static_cast<std::size_t>(at(0, 0).model->activation_rows(batch_, shape_.seq_len)) *
           shape_.d_model;
  }

  // `body(rank index, rank)` on every rank of `stage` at once, then waits for their devices.
  template <class F>
  void run(int stage, F body) {
    groups_[static_cast<std::size_t>(stage)]->run([&](int r) {
      Rank& me = at(stage, r);
      body(r, me);
      me.ctx->synchronize();
    });
  }

  // Micro-batch `b` forward through every stage into `slot`; its per-position losses.
  std::vector<float> forward(int slot, const Batch& b) {
    for (int s = 0; s < stages(); ++s)
      run(s, [&](int r, Rank& me) {
        if (s > 0)
          STRATA_CUDA_CHECK(
              cudaMemcpyAsync(me.model->stage_input(slot), at(s - 1, r).model->stage_output(slot),
                              boundary() * sizeof(T), cudaMemcpyDeviceToDevice, me.ctx->stream()));
        me.model->forward(slot, *me.parameters, b.tokens.data(), b.targets.data(), batch_,
                          shape_.seq_len);
      });
    return download(at(stages() - 1, 0).model->losses(slot),
                    static_cast<std::size_t>(batch_) * shape_.seq_len);
  }

  // Before a backward on a stage before the last: the next stage's input gradient becomes this
  // rank's output gradient.
  void receive_output_grad(int stage, int tp_rank) {
    if (stage == stages() - 1) return;
    Rank& me = at(stage, tp_rank);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(
        me.model->stage_output_grad(), at(stage + 1, tp_rank).model->stage_input_grad(),
        boundary() * sizeof(T), cudaMemcpyDeviceToDevice, me.ctx->stream()));
  }

 private:
  GptShape shape_;
  int batch_;
  std::vector<std::unique_ptr<strata::testing::ThreadGroup>> groups_;  // per stage
  std::vector<std::vector<Rank>> ranks_;                               // [stage][tp rank]
};

}  // namespace strata::cuda::testing
