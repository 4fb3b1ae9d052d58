// How the backward pass runs changes memory, never results, in one process and under
// tensor-parallel (ranks as threads, with and without sequence parallelism) and pipeline
// partitions with several micro-batches in flight:
// - activation checkpointing: selective and full recomputation give bitwise the losses and
//   gradients of keeping everything (fp32 and double, bf16 and fp16 rounding on), and keep
//   strictly less;
// - the split backward (input gradients first, weight gradients later, as zero-bubble pipeline
//   schedules run it) gives bitwise the input and parameter gradients of the fused backward under
//   every recompute mode, even with other micro-batches' input passes in between, and keeps what
//   activation_elements predicts.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "model/core/error.h"
#include "model/gpt.h"
#include "tests/support/partitioned_ranks.h"

namespace strata {
namespace {

using testing::PartitionedRanks;

const GptShape kShape{3, 4, 16, 6, 37};  // 3 layers, 4 heads, C 16, T 6, vocab 37 (padded 128)
constexpr int kBatch = 2;
constexpr int kMicroBatches = 2;

struct Layout {
  int tp = 1;
  bool sequence_parallel = false;
  std::vector<std::pair<int, int>> stage_layers = {{0, 3}};  // [begin, end) per stage
  bool experts = false;  // the middle block an MoE block (4 experts, top-2, capacity drops)
  int pp() const { return static_cast<int>(stage_layers.size()); }
  GptShape shape() const {
    if (!experts) return kShape;
    MoeConfig moe;
    moe.experts = 4;
    moe.top_k = 2;
    moe.every = 2;
    moe.capacity_factor = 1.0;
    return GptShape(kShape.n_layer, kShape.n_head, kShape.d_model, kShape.seq_len,
                    kShape.vocab_size, moe);
  }
};

// Losses of every micro-batch, then every rank's gradient buffer (in stage, tp-rank order), every
// input gradient a stage after the first sent back (in micro-batch, stage, tp-rank order), and
// the activation bytes of every rank.
template <class T>
struct Result {
  std::vector<T> losses;
  std::vector<std::vector<T>> grads, input_grads;
  std::vector<std::size_t> activation_bytes, per_layer_bytes;
};

// All forwards (each micro-batch in its own slot) through every stage, then all backwards, as a
// GPipe schedule does; parameters from the layout-independent initialisation. With
// options.split_backward every micro-batch's input pass runs, stage by stage, before any weight
// pass, so each weight pass reads its stash after the other micro-batches' recomputation.
template <class T>
Result<T> run(const Layout& layout, const GptOptions& options) {
  const GptShape shape = layout.shape();
  PartitionedRanks<T> grid(shape, layout.stage_layers, layout.tp, layout.sequence_parallel, kBatch,
                           kMicroBatches, options, [&](const ParameterLayout& part) {
                             std::vector<float> init(part.total());
                             initialize_gpt_parameters(part, shape, 17, init.data());
                             std::vector<T> params(init.begin(), init.end());
                             // Round as the trainer's weight copy is (a no-op in fp32).
                             cpu::round_to_dtype(params.data(), static_cast<long>(params.size()),
                                                 options.compute);
                             return params;
                           });
  auto& groups = grid.groups;
  auto& ranks = grid.ranks;
  using Rank = typename PartitionedRanks<T>::Rank;
  std::mt19937_64 rng(23);
  std::vector<std::vector<std::int32_t>> tokens(kMicroBatches), targets(kMicroBatches);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int i = 0; i < kBatch * shape.seq_len; ++i) {
      tokens[mb].push_back(static_cast<std::int32_t>(rng() % shape.vocab_size));
      targets[mb].push_back(static_cast<std::int32_t>(rng() % shape.vocab_size));
    }
  }
  Result<T> result;
  result.losses.assign(kMicroBatches, T(0));
  const int last = layout.pp() - 1;
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int s = 0; s < layout.pp(); ++s) {
      groups[s]->run([&](int r) {
        const T* input = s == 0 ? nullptr : ranks[s - 1][r].model->output(mb);
        const T loss = ranks[s][r].model->forward(mb, ranks[s][r].params.data(), tokens[mb].data(),
                                                  input, targets[mb].data(), kBatch, shape.seq_len);
        if (s == last && r == 0) result.losses[mb] = loss;
      });
    }
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int s = last; s >= 0; --s) {
      groups[s]->run([&](int r) {
        Rank& rank = ranks[s][r];
        const T* output_grad = s == last ? nullptr : ranks[s + 1][r].model->input_grad(mb);
        FlatParameters<T> flat(rank.model->segments(), rank.params.data(), rank.grads.data());
        if (options.split_backward)
          rank.model->backward_input(mb, flat, output_grad, T(1));
        else
          rank.model->backward(mb, flat, output_grad, T(1));
      });
      if (s > 0)
        for (Rank& rank : ranks[s]) {
          const T* sent = rank.model->input_grad(mb);
          result.input_grads.emplace_back(
              sent, sent + rank.model->activation_rows(kBatch, shape.seq_len) * shape.d_model);
        }
    }
  }
  if (options.split_backward)
    for (int mb = 0; mb < kMicroBatches; ++mb)
      for (int s = last; s >= 0; --s)
        groups[s]->run([&](int r) {
          Rank& rank = ranks[s][r];
          FlatParameters<T> flat(rank.model->segments(), rank.params.data(), rank.grads.data());
          rank.model->backward_weight(mb, flat);
        });
  for (auto& stage : ranks) {
    for (Rank& rank : stage) {
      result.grads.push_back(rank.grads);
      result.activation_bytes.push_back(rank.model->activation_bytes());
      result.per_layer_bytes.push_back(rank.model->activation_bytes_per_layer());
    }
  }
  return result;
}

// Bitwise the same losses, input gradients sent back and parameter gradients on every rank.
template <class T>
void expect_same_run(const Result<T>& actual, const Result<T>& expected) {
  EXPECT_EQ(actual.losses, expected.losses);
  EXPECT_TRUE(actual.input_grads == expected.input_grads) << "input gradients differ";
  ASSERT_EQ(actual.grads.size(), expected.grads.size());
  for (std::size_t r = 0; r < expected.grads.size(); ++r)
    EXPECT_TRUE(actual.grads[r] == expected.grads[r]) << "rank " << r << ": gradients differ";
}

template <class T>
void expect_recompute_is_exact(const Layout& layout, cpu::ComputeDtype compute) {
  const Result<T> kept = run<T>(layout, {compute, Recompute::none});
  for (Recompute mode : {Recompute::selective, Recompute::full}) {
    SCOPED_TRACE(recompute_name(mode));
    expect_same_run(run<T>(layout, {compute, mode}), kept);
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

template <class T>
void expect_split_is_exact(const Layout& layout, cpu::ComputeDtype compute) {
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    SCOPED_TRACE(recompute_name(mode));
    const Result<T> fused = run<T>(layout, {compute, mode, false});
    const Result<T> split = run<T>(layout, {compute, mode, true});
    expect_same_run(split, fused);
    for (std::size_t r = 0; r < fused.activation_bytes.size(); ++r)  // the stash is extra
      EXPECT_GT(split.activation_bytes[r], fused.activation_bytes[r]) << "rank " << r;
  }
}

TEST(SplitBackward, GradientsAreBitwiseTheFusedOnesInOneProcess) {
  expect_split_is_exact<float>(Layout{}, cpu::ComputeDtype::fp32);
  expect_split_is_exact<double>(Layout{}, cpu::ComputeDtype::fp32);
  expect_split_is_exact<float>(Layout{}, cpu::ComputeDtype::bf16);
}

TEST(SplitBackward, GradientsAreBitwiseTheFusedOnesUnderTensorParallelism) {
  for (bool sequence_parallel : {false, true}) {
    SCOPED_TRACE(sequence_parallel ? "sequence parallel" : "tensor parallel");
    expect_split_is_exact<float>(Layout{2, sequence_parallel}, cpu::ComputeDtype::fp32);
  }
  expect_split_is_exact<float>(Layout{2, true}, cpu::ComputeDtype::fp16);
}

TEST(SplitBackward, GradientsAreBitwiseTheFusedOnesUnderPipelineParallelism) {
  expect_split_is_exact<float>(Layout{1, false, {{0, 1}, {1, 3}}}, cpu::ComputeDtype::fp32);
  expect_split_is_exact<float>(Layout{2, true, {{0, 2}, {2, 3}}}, cpu::ComputeDtype::bf16);
  expect_split_is_exact<double>(Layout{2, false, {{0, 1}, {1, 2}, {2, 3}}},
                                cpu::ComputeDtype::fp32);
}

// MoE blocks: their expert activation gradients stay in the slot from B to W; recomputation
// reruns the experts to the same values.
TEST(SplitBackward, ExpertBlocksSplitAndRecomputeExactly) {
  for (const Layout& layout :
       {Layout{1, false, {{0, 3}}, true}, Layout{2, true, {{0, 2}, {2, 3}}, true}}) {
    expect_split_is_exact<float>(layout, cpu::ComputeDtype::fp32);
    expect_recompute_is_exact<float>(layout, cpu::ComputeDtype::bf16);
  }
}

TEST(SplitBackward, RefusesPassesOutOfOrder) {
  Gpt<float> model(kShape, ModelPartition::whole(kShape), nullptr, kBatch, 2,
                   {cpu::ComputeDtype::fp32, Recompute::none, true});
  std::vector<float> init(model.layout().total()), grads(init.size(), 0.0f);
  initialize_gpt_parameters(model.layout(), kShape, 17, init.data());
  FlatParameters<float> flat(model.segments(), init.data(), grads.data());
  std::vector<std::int32_t> tokens(kBatch * kShape.seq_len, 1);
  EXPECT_THROW(model.backward_weight(0, flat), Error);  // nothing forwarded
  model.forward(0, flat, tokens.data(), nullptr, tokens.data(), kBatch, kShape.seq_len);
  EXPECT_THROW(model.backward_weight(0, flat), Error);  // input pass first
  model.backward_input(0, flat, nullptr, 1.0f);
  EXPECT_THROW(model.backward_input(0, flat, nullptr, 1.0f), Error);  // once per forward
  // The slot is still taken until its weight pass: a forward into it would clobber the stash.
  EXPECT_THROW(
      model.forward(0, flat, tokens.data(), nullptr, tokens.data(), kBatch, kShape.seq_len), Error);
  model.forward(1, flat, tokens.data(), nullptr, tokens.data(), kBatch, kShape.seq_len);
  model.backward_weight(0, flat);
  EXPECT_THROW(model.backward_weight(0, flat), Error);  // once
  model.forward(0, flat, tokens.data(), nullptr, tokens.data(), kBatch, kShape.seq_len);

  Gpt<float> fused_only(kShape, kBatch);
  FlatParameters<float> fused_flat(fused_only.segments(), init.data(), grads.data());
  fused_only.forward(0, fused_flat, tokens.data(), nullptr, tokens.data(), kBatch, kShape.seq_len);
  EXPECT_THROW(fused_only.backward_input(0, fused_flat, nullptr, 1.0f), Error);
}

}  // namespace
}  // namespace strata
