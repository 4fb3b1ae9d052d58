// Context parallelism inside the model (docs/ARCHITECTURE.md §2, "cp"): cp ranks (threads,
// tests/support/thread_group.h), each holding its two chunks of every sequence, compute the whole
// model's step. The mean of their losses is the whole model's loss and the sum of their gradients
// (each of its own loss over cp) the whole model's gradient, in double to 1e-10, for learned and
// rotary positions, every recompute policy and both ways K/V travel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "model/core/context_chunks.h"
#include "model/gpt.h"
#include "tests/support/model_shapes.h"
#include "tests/support/thread_group.h"

namespace strata {
namespace {

using testing::ThreadGroup;
using testing::ThreadRank;

constexpr int kBatch = 2;
// 2 layers, 4 heads, C 16, T 16 (8 chunks of 2 at cp 4), vocabulary 37.
const GptShape kShape{2, 4, 16, 16, 37};

struct Result {
  double loss = 0;
  std::vector<double> grads;
};

std::vector<std::int32_t> random_ids(std::uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> ids(kBatch * kShape.seq_len);
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  return ids;
}

std::vector<double> random_params(const ParameterLayout& layout) {
  std::vector<double> params(layout.total());
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (double& p : params) p = normal(rng);
  return params;
}

Result whole_model(const GptShape& shape, const std::vector<double>& params,
                   const std::vector<std::int32_t>& tokens,
                   const std::vector<std::int32_t>& targets) {
  Gpt<double> model(shape, kBatch);
  Result r;
  r.grads.assign(params.size(), 0.0);
  r.loss = model.forward(params.data(), tokens.data(), targets.data(), kBatch, shape.seq_len);
  model.backward(params.data(), r.grads.data(), 1.0);
  return r;
}

Result context_parallel(const GptShape& shape, int cp, const GptOptions& options,
                        const std::vector<double>& params, const std::vector<std::int32_t>& tokens,
                        const std::vector<std::int32_t>& targets) {
  ThreadGroup group(cp);
  std::vector<Result> ranks(static_cast<std::size_t>(cp));
  group.run([&](int rank) {
    ThreadRank comm(group, rank);
    ModelPartition partition = ModelPartition::whole(shape);
    partition.context = {cp, rank};
    Gpt<double> model(shape, partition, nullptr, kBatch, 1, options, nullptr, &comm);
    const int T_local = shape.seq_len / cp;
    std::vector<std::int32_t> local_tokens(kBatch * T_local), local_targets(local_tokens.size());
    partition.context.take(tokens.data(), local_tokens.data(), kBatch, shape.seq_len);
    partition.context.take(targets.data(), local_targets.data(), kBatch, shape.seq_len);
    Result& r = ranks[static_cast<std::size_t>(rank)];
    r.grads.assign(params.size(), 0.0);
    r.loss = model.forward(0, params.data(), local_tokens.data(), nullptr, local_targets.data(),
                           kBatch, T_local);
    model.backward(0, params.data(), r.grads.data(), nullptr, 1.0 / cp);
  });
  Result sum;
  sum.grads.assign(params.size(), 0.0);
  for (const Result& r : ranks) {
    sum.loss += r.loss / cp;
    for (std::size_t i = 0; i < params.size(); ++i) sum.grads[i] += r.grads[i];
  }
  return sum;
}

void expect_same_step(const GptShape& shape, int cp, const GptOptions& options) {
  SCOPED_TRACE(::testing::Message()
               << "cp " << cp << ", " << kContextCommChoices.word(options.context_comm)
               << ", recompute " << recompute_name(options.recompute));
  const std::vector<double> params = random_params(ParameterLayout::for_gpt(shape));
  const auto tokens = random_ids(1, shape.vocab_size), targets = random_ids(2, shape.vocab_size);
  const Result whole = whole_model(shape, params, tokens, targets);
  const Result split = context_parallel(shape, cp, options, params, tokens, targets);
  EXPECT_NEAR(split.loss, whole.loss, 1e-12 * std::abs(whole.loss));
  double scale = 0, worst = 0;
  for (double g : whole.grads) scale = std::max(scale, std::abs(g));
  for (std::size_t i = 0; i < params.size(); ++i)
    worst = std::max(worst, std::abs(split.grads[i] - whole.grads[i]));
  EXPECT_LT(worst, 1e-10 * scale) << "largest gradient " << scale;
}

TEST(ModelContext, ChunksMapRowsToTheirPositions) {
  // T 8 at cp 2: chunks of 2, member 0 holds chunks 0 and 3, member 1 chunks 1 and 2.
  const std::vector<int> whole{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<int> local(8);
  ContextChunks{2, 0}.take(whole.data(), local.data(), 2, 8);
  EXPECT_EQ(local, (std::vector<int>{0, 1, 6, 7, 10, 11, 16, 17}));
  ContextChunks{2, 1}.take(whole.data(), local.data(), 2, 8);
  EXPECT_EQ(local, (std::vector<int>{2, 3, 4, 5, 12, 13, 14, 15}));
  // Rows 3..6 of member 0's (2 sequences of 4 rows): runs at positions 7; 0-1; 6.
  std::vector<std::vector<long>> runs;
  ContextChunks{2, 0}.for_each_run(3, 4, 4, [&](long at, long count, long position) {
    runs.push_back({at, count, position});
  });
  EXPECT_EQ(runs, (std::vector<std::vector<long>>{{0, 1, 7}, {1, 2, 0}, {3, 1, 6}}));
  EXPECT_EQ(ContextChunks{}.position(5, 6), 5);  // cp 1: the identity
}

TEST(ModelContext, LearnedPositionsEqualTheWholeModel) {
  for (int cp : {2, 4})
    for (ContextComm comm : {ContextComm::ring, ContextComm::all_gather}) {
      GptOptions options;
      options.context_comm = comm;
      expect_same_step(kShape, cp, options);
    }
}

TEST(ModelContext, RecomputationEqualsTheWholeModel) {
  for (Recompute recompute : {Recompute::selective, Recompute::full}) {
    GptOptions options;
    options.recompute = recompute;
    expect_same_step(kShape, 2, options);
  }
}

TEST(ModelContext, RotaryPositionsAndGroupedQueriesEqualTheWholeModel) {
  const GptShape llama = testing::llama_shape(kShape, 24, 2);
  for (int cp : {2, 4}) {
    GptOptions options;
    options.context_comm = cp == 2 ? ContextComm::all_gather : ContextComm::ring;
    expect_same_step(llama, cp, options);
  }
}

TEST(ModelContext, ExpertsAreRefused) {
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  const GptShape shape(2, 4, 16, 16, 37, moe);
  ThreadGroup group(2);
  ThreadRank comm(group, 0);
  ModelPartition partition = ModelPartition::whole(shape);
  partition.context = {2, 0};
  EXPECT_THROW(Gpt<double>(shape, partition, nullptr, kBatch, 1, {}, nullptr, &comm), Error);
}

}  // namespace
}  // namespace strata
