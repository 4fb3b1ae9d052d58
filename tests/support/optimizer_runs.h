// Shared by the optimizer tests (tests/unit/*_optimizer_test.cpp, adafactor_test, muon_test): an
// optimizer (make_optimizer) run for kSteps updates on a range of a small model's flat buffer,
// with parameters and gradients that are functions of (tensor, logical index) and so the same
// under any layout, checked element by element against a reference computed on whole logical
// tensors; and the same run split over ZeRO shards and tensor-parallel slices on thread ranks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "tests/support/thread_group.h"
#include "train/optimizer/optimizer.h"

namespace strata::testing {

inline const GptShape kOptimizerShape{2, 2, 32, 16, 100};
constexpr int kOptimizerSteps = 4;

inline double step_lr(int step) { return 1e-2 / step; }  // a schedule: each step its own lr

// A value that is a function of (seed, tensor, logical index), in [-1, 1) (a splitmix64 hash).
inline float logical_value(std::uint64_t seed, std::size_t tensor, std::int64_t logical) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15u + tensor * 0xBF58476D1CE4E5B9u +
                    static_cast<std::uint64_t>(logical) * 0x94D049BB133111EBu;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
}

// The index of tensor `name` in the whole model's layout.
inline std::size_t whole_index(const std::string& name) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kOptimizerShape);
  std::size_t k = 0;
  while (whole.tensors().at(k).name != name) ++k;
  return k;
}

// The layout's elements filled with logical_value (0 in the padding).
inline std::vector<float> layout_values(const ParameterLayout& layout, std::size_t buffer,
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

// The parameters and gradients of whole tensor k as the runs see them, in double.
inline std::vector<double> whole_values(std::size_t k, std::size_t n, std::uint64_t seed,
                                        double scale = 1.0) {
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = static_cast<double>(logical_value(seed, k, static_cast<std::int64_t>(i)) *
                                    static_cast<float>(scale));
  return values;
}
inline std::vector<double> initial_params(std::size_t k, std::size_t n) {
  return whole_values(k, n, 1);
}
inline std::vector<double> step_grads(std::size_t k, std::size_t n, int step, double scale) {
  return whole_values(k, n, static_cast<std::uint64_t>(100 + step), scale);
}

// Per tensor of the whole layout, its parameters after kOptimizerSteps, in logical order.
using ReferenceParams = std::vector<std::vector<double>>;

// kOptimizerSteps updates of `range` of a buffer over `layout` by this rank's optimizer.
inline std::vector<float> optimizer_run(const ParameterLayout& layout, ElementRange range,
                                        std::size_t buffer, const OptimizerConfig& config,
                                        OptimizerGroups groups, double grad_scale) {
  std::unique_ptr<Optimizer> optimizer = make_optimizer(layout, range, config, groups);
  std::vector<float> params = layout_values(layout, buffer, 1);
  for (int step = 1; step <= kOptimizerSteps; ++step) {
    const std::vector<float> grads = layout_values(layout, buffer, 100 + step);
    optimizer->update(params.data() + range.begin, grads.data() + range.begin,
                      OptimizerStep{step_lr(step), grad_scale, step});
  }
  return params;
}

// Every element of `range` of a run over `layout` against the reference, by logical index.
inline void expect_reference(const ReferenceParams& ref, const ParameterLayout& layout,
                             ElementRange range, const std::vector<float>& params,
                             const std::string& what, double tolerance) {
  int checked = 0;
  for (const TensorView& t : layout.tensors()) {
    const std::size_t k = whole_index(t.name);
    for (std::size_t i = 0; i < t.size; ++i) {
      if (!range.contains(t.offset + i)) continue;
      const double expected =
          ref[k][static_cast<std::size_t>(t.slice.logical_index(static_cast<std::int64_t>(i)))];
      const double got = params[t.offset + i];
      ASSERT_NEAR(got, expected, tolerance * (1 + std::abs(expected)))
          << what << ": " << t.name << " element " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << what;
}

// The whole buffer against the reference (gradients scaled by 0.5), padding untouched.
inline void expect_whole_run(const ReferenceParams& ref, const OptimizerConfig& config,
                             double tolerance) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  const std::vector<float> params = optimizer_run(layout, {0, buffer}, buffer, config, {}, 0.5);
  expect_reference(ref, layout, {0, buffer}, params, "whole", tolerance);
  for (std::size_t i = layout.total(); i < buffer; ++i) EXPECT_EQ(params[i], 0.0f);
}

// ZeRO shards of 2, 3 and 4 thread ranks, each its shard, against the reference (grad scale 1).
inline void expect_shard_runs(const ReferenceParams& ref, const OptimizerConfig& config,
                              double tolerance) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  for (int shards : {2, 3, 4}) {
    const std::size_t buffer = layout.padded_total(shards);
    ThreadGroup group(shards);
    std::vector<std::vector<float>> results(static_cast<std::size_t>(shards));
    group.run([&](int r) {
      ThreadRank owners(group, r);
      results[static_cast<std::size_t>(r)] = optimizer_run(
          layout, layout.shard(r, shards), buffer, config, OptimizerGroups{&owners, nullptr}, 1.0);
    });
    for (int r = 0; r < shards; ++r)
      expect_reference(ref, layout, layout.shard(r, shards), results[static_cast<std::size_t>(r)],
                       "shard " + std::to_string(r) + " of " + std::to_string(shards), tolerance);
  }
}

// Tensor parallelism of 2 thread ranks, alone and with each tp rank's layout in 2 ZeRO shards
// (rank (s, t): shard s of tp rank t's layout; owners groups over s, tp groups over t).
inline void expect_tensor_parallel_runs(const ReferenceParams& ref, const OptimizerConfig& config,
                                        double tolerance) {
  constexpr int kTp = 2;
  std::vector<ParameterLayout> layouts;
  for (int t = 0; t < kTp; ++t) {
    ModelPartition p = ModelPartition::whole(kOptimizerShape);
    p.tp_rank = t;
    p.tp_size = kTp;
    layouts.push_back(ParameterLayout::for_partition(kOptimizerShape, p));
  }
  for (int shards : {1, 2}) {
    std::vector<std::unique_ptr<ThreadGroup>> owner_groups, tp_groups;
    for (int t = 0; t < kTp; ++t) owner_groups.push_back(std::make_unique<ThreadGroup>(shards));
    for (int s = 0; s < shards; ++s) tp_groups.push_back(std::make_unique<ThreadGroup>(kTp));
    ThreadGroup all(kTp * shards);
    std::vector<std::vector<float>> results(static_cast<std::size_t>(kTp * shards));
    all.run([&](int rank) {
      const int t = rank / shards, s = rank % shards;
      ThreadRank owners(*owner_groups[static_cast<std::size_t>(t)], s),
          tp(*tp_groups[static_cast<std::size_t>(s)], t);
      const ParameterLayout& layout = layouts[static_cast<std::size_t>(t)];
      results[static_cast<std::size_t>(rank)] =
          optimizer_run(layout, layout.shard(s, shards), layout.padded_total(shards), config,
                        OptimizerGroups{shards > 1 ? &owners : nullptr, &tp}, 1.0);
    });
    for (int rank = 0; rank < kTp * shards; ++rank) {
      const int t = rank / shards, s = rank % shards;
      const ParameterLayout& layout = layouts[static_cast<std::size_t>(t)];
      expect_reference(ref, layout, layout.shard(s, shards),
                       results[static_cast<std::size_t>(rank)],
                       "tp rank " + std::to_string(t) + ", shard " + std::to_string(s) + " of " +
                           std::to_string(shards),
                       tolerance);
    }
  }
}

}  // namespace strata::testing
