// Activation checkpointing changes memory, never results: selective and full recomputation give
// bitwise the losses and gradients of keeping everything (fp32 and double, bf16 rounding on), in
// one process and under tensor-parallel (ranks as threads, with and without sequence parallelism)
// and pipeline partitions with several micro-batches in flight; and they keep strictly less.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "tests/support/partition_support.h"
#include "tests/support/thread_group.h"

namespace strata {
namespace {

using testing::stage_partition;
using testing::ThreadGroup;
using testing::ThreadRank;

const GptShape kShape{3, 4, 16, 6, 37};  // 3 layers, 4 heads, C 16, T 6, vocab 37 (padded 128)
constexpr int kBatch = 2;
constexpr int kMicroBatches = 2;

struct Layout {
  int tp = 1;
  bool sequence_parallel = false;
  std::vector<std::pair<int, int>> stage_layers = {{0, 3}};  // [begin, end) per stage
  int pp() const { return static_cast<int>(stage_layers.size()); }
};

// Losses of every micro-batch, then every rank's gradient buffer (in stage, tp-rank order), and
// the activation bytes of every rank.
template <class T>
struct Result {
  std::vector<T> losses;
  std::vector<std::vector<T>> grads;
  std::vector<std::size_t> activation_bytes, per_layer_bytes;
};

// All forwards (each micro-batch in its own slot) through every stage, then all backwards, as a
// GPipe schedule does; parameters from the layout-independent initialisation.
template <class T>
Result<T> run(const Layout& layout, const GptOptions& options) {
  struct Rank {
    std::unique_ptr<ThreadRank> comm;
    std::unique_ptr<Gpt<T>> model;
    std::vector<T> params, grads;
  };
  std::vector<std::unique_ptr<ThreadGroup>> groups;
  std::vector<std::vector<Rank>> ranks(layout.pp());  // [stage][tp]
  for (int s = 0; s < layout.pp(); ++s) {
    groups.push_back(std::make_unique<ThreadGroup>(layout.tp));
    for (int r = 0; r < layout.tp; ++r) {
      const ModelPartition p =
          stage_partition(layout.stage_layers, s, r, layout.tp, layout.sequence_parallel);
      Rank rank;
      rank.comm = std::make_unique<ThreadRank>(*groups[s], r);
      rank.model =
          std::make_unique<Gpt<T>>(kShape, p, rank.comm.get(), kBatch, kMicroBatches, options);
      const ParameterLayout& part = rank.model->layout();
      std::vector<float> init(part.total());
      initialize_gpt_parameters(part, kShape, 17, init.data());
      rank.params.assign(init.begin(), init.end());
      // Round as the trainer's weight copy is (a no-op in fp32).
      cpu::round_to_dtype(rank.params.data(), static_cast<long>(rank.params.size()),
                          options.compute);
      rank.grads.assign(part.total(), T(0));
      ranks[s].push_back(std::move(rank));
    }
  }
  std::mt19937_64 rng(23);
  std::vector<std::vector<std::int32_t>> tokens(kMicroBatches), targets(kMicroBatches);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int i = 0; i < kBatch * kShape.seq_len; ++i) {
      tokens[mb].push_back(static_cast<std::int32_t>(rng() % kShape.vocab_size));
      targets[mb].push_back(static_cast<std::int32_t>(rng() % kShape.vocab_size));
    }
  }
  Result<T> result;
  result.losses.assign(kMicroBatches, T(0));
  const int last = layout.pp() - 1;
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int s = 0; s < layout.pp(); ++s) {
      groups[s]->run([&](int r) {
        const T* input = s == 0 ? nullptr : ranks[s - 1][r].model->output(mb);
        const T loss =
            ranks[s][r].model->forward(mb, ranks[s][r].params.data(), tokens[mb].data(), input,
                                       targets[mb].data(), kBatch, kShape.seq_len);
        if (s == last && r == 0) result.losses[mb] = loss;
      });
    }
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int s = last; s >= 0; --s) {
      groups[s]->run([&](int r) {
        const T* output_grad = s == last ? nullptr : ranks[s + 1][r].model->input_grad(mb);
        ranks[s][r].model->backward(mb, ranks[s][r].params.data(), ranks[s][r].grads.data(),
                                    output_grad, T(1));
      });
    }
  }
  for (auto& stage : ranks) {
    for (Rank& rank : stage) {
      result.grads.push_back(rank.grads);
      result.activation_bytes.push_back(rank.model->activation_bytes());
      result.per_layer_bytes.push_back(rank.model->activation_bytes_per_layer());
    }
  }
  return result;
}

template <class T>
void expect_recompute_is_exact(const Layout& layout, cpu::ComputeDtype compute) {
  const Result<T> kept = run<T>(layout, {compute, Recompute::none});
  for (Recompute mode : {Recompute::selective, Recompute::full}) {
    SCOPED_TRACE(mode == Recompute::full ? "full" : "selective");
    const Result<T> recomputed = run<T>(layout, {compute, mode});
    EXPECT_EQ(recomputed.losses, kept.losses);
    ASSERT_EQ(recomputed.grads.size(), kept.grads.size());
    for (std::size_t r = 0; r < kept.grads.size(); ++r)
      EXPECT_TRUE(recomputed.grads[r] == kept.grads[r]) << "rank " << r << ": gradients differ";
  }
}

TEST(Recompute, GradientsAreBitwiseTheSameInOneProcess) {
  expect_recompute_is_exact<float>(Layout{}, cpu::ComputeDtype::fp32);
  expect_recompute_is_exact<double>(Layout{}, cpu::ComputeDtype::fp32);
  expect_recompute_is_exact<float>(Layout{}, cpu::ComputeDtype::bf16);
}

TEST(Recompute, GradientsAreBitwiseTheSameUnderTensorParallelism) {
  for (bool sequence_parallel : {false, true}) {
    SCOPED_TRACE(sequence_parallel ? "sequence parallel" : "tensor parallel");
    expect_recompute_is_exact<float>(Layout{2, sequence_parallel}, cpu::ComputeDtype::fp32);
    expect_recompute_is_exact<double>(Layout{2, sequence_parallel}, cpu::ComputeDtype::fp32);
  }
  expect_recompute_is_exact<float>(Layout{2, true}, cpu::ComputeDtype::fp16);
}

TEST(Recompute, GradientsAreBitwiseTheSameUnderPipelineParallelism) {
  expect_recompute_is_exact<float>(Layout{1, false, {{0, 1}, {1, 3}}}, cpu::ComputeDtype::fp32);
  expect_recompute_is_exact<float>(Layout{2, true, {{0, 2}, {2, 3}}}, cpu::ComputeDtype::fp32);
  expect_recompute_is_exact<double>(Layout{2, false, {{0, 2}, {2, 3}}}, cpu::ComputeDtype::fp32);
}

TEST(Recompute, KeepsStrictlyLessActivationMemory) {
  for (const Layout& layout : {Layout{}, Layout{2, true, {{0, 2}, {2, 3}}}}) {
    const auto none = run<float>(layout, {cpu::ComputeDtype::fp32, Recompute::none});
    const auto selective = run<float>(layout, {cpu::ComputeDtype::fp32, Recompute::selective});
    const auto full = run<float>(layout, {cpu::ComputeDtype::fp32, Recompute::full});
    for (std::size_t r = 0; r < none.activation_bytes.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_GT(none.activation_bytes[r], selective.activation_bytes[r]);
      EXPECT_GT(selective.activation_bytes[r], full.activation_bytes[r]);
      EXPECT_GT(none.per_layer_bytes[r], selective.per_layer_bytes[r]);
      EXPECT_GT(selective.per_layer_bytes[r], full.per_layer_bytes[r]);
      EXPECT_GT(full.per_layer_bytes[r], 0u);
    }
    if (layout.pp() == 1)
      std::cout << "activation bytes (" << kMicroBatches << " slots of B " << kBatch << ", T "
                << kShape.seq_len << ", C " << kShape.d_model << ", " << kShape.n_layer
                << " layers): none " << none.activation_bytes[0] << " (" << none.per_layer_bytes[0]
                << "/layer), selective " << selective.activation_bytes[0] << " ("
                << selective.per_layer_bytes[0] << "/layer), full " << full.activation_bytes[0]
                << " (" << full.per_layer_bytes[0] << "/layer)\n";
  }
}

}  // namespace
}  // namespace strata
