// The training-window sampler, evaluation windows, the keyed permutation under the sampler and
// the train/validation document split.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "data/loader.h"
#include "data/permutation.h"
#include "data/split.h"
#include "model/core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;

TEST(KeyedPermutation, IsABijectionForManySizes) {
  for (std::uint64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 4097}) {
    const KeyedPermutation permutation(n, 99 + n);
    std::vector<bool> seen(n, false);
    for (std::uint64_t x = 0; x < n; ++x) {
      const std::uint64_t y = permutation(x);
      ASSERT_LT(y, n);
      ASSERT_FALSE(seen[y]) << "n " << n << " collides at " << y;
      seen[y] = true;
    }
  }
}

TEST(KeyedPermutation, KeysGiveDifferentOrders) {
  const KeyedPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (std::uint64_t x = 0; x < 1000; ++x) same += a(x) == b(x) ? 1 : 0;
  EXPECT_LT(same, 20);  // ~1 expected for independent random permutations
}

// A split of `n` tokens whose token i is i % 50000, so a window's first token names its start.
struct RampSplit {
  explicit RampSplit(std::uint64_t n, int shards = 3) : dir("loader_split") {
    std::vector<std::int32_t> tokens(n);
    for (std::uint64_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>(i % 50000);
    const ShardInfo info{50000, 0, "x"};
    for (int s = 0; s < shards; ++s) {
      const std::uint64_t begin = n * s / shards, end = n * (s + 1) / shards;
      write_token_shard(dir / ("shard_0000" + std::to_string(s) + ".h5"),
                        std::span(tokens).subspan(begin, end - begin), info);
    }
    source = std::make_unique<TokenSource>(TokenSource::open(dir.str()));
  }
  TempDir dir;
  std::unique_ptr<TokenSource> source;
};

TEST(WindowSampler, EveryEpochVisitsEveryWindowOnce) {
  const RampSplit split(1001);  // (1001 - 1) / 16 = 62 windows, the last token left over
  const int seq_len = 16;
  const WindowSampler sampler(*split.source, seq_len, 1234);
  const std::uint64_t windows = sampler.windows_per_epoch();
  ASSERT_EQ(windows, 62u);
  std::vector<std::uint64_t> previous_order;
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<std::uint64_t> starts;
    std::vector<std::uint64_t> order;
    for (std::uint64_t j = 0; j < windows; ++j) {
      std::vector<std::int32_t> inputs(seq_len), targets(seq_len);
      sampler.sample(epoch * windows + j, inputs.data(), targets.data());
      const auto start = static_cast<std::uint64_t>(inputs[0]);
      ASSERT_EQ(start % seq_len, 0u);
      for (int t = 0; t < seq_len; ++t) {
        ASSERT_EQ(inputs[t], static_cast<std::int32_t>(start + t));
        ASSERT_EQ(targets[t], static_cast<std::int32_t>(start + t + 1));
      }
      starts.insert(start);
      order.push_back(start);
    }
    EXPECT_EQ(starts.size(), windows) << "epoch " << epoch;
    EXPECT_NE(order, previous_order) << "epoch " << epoch << " repeats the previous order";
    previous_order = order;
  }
}

TEST(WindowSampler, IsAPureFunctionOfSeedAndSample) {
  const RampSplit split(5000);
  const WindowSampler a(*split.source, 8, 7), again(*split.source, 8, 7),
      other(*split.source, 8, 8);
  std::vector<std::int32_t> x(8), y(8), tx(8), ty(8);
  // Same (seed, g) in any call order gives the same window: resume is exact.
  for (std::uint64_t g : {500u, 3u, 12345u, 3u, 0u}) {
    a.sample(g, x.data(), tx.data());
    again.sample(g, y.data(), ty.data());
    EXPECT_EQ(x, y);
    EXPECT_EQ(tx, ty);
  }
  int differ = 0;
  for (std::uint64_t g = 0; g < 100; ++g) differ += a.window_of(g) != other.window_of(g) ? 1 : 0;
  EXPECT_GT(differ, 90);
}

TEST(WindowSampler, RejectsASplitShorterThanOneWindow) {
  const RampSplit split(16, 1);
  EXPECT_THROW(WindowSampler(*split.source, 16, 1), Error);
  EXPECT_EQ(WindowSampler(*split.source, 15, 1).windows_per_epoch(), 1u);
}

TEST(EvalWindows, FollowTheDesignDefinition) {
  const RampSplit split(1000);
  const int seq_len = 64;
  // floor((n - 1) / T), with n clipped to the split.
  EXPECT_EQ(eval_window_count(*split.source, 0, seq_len), 0u);
  EXPECT_EQ(eval_window_count(*split.source, 64, seq_len), 0u);
  EXPECT_EQ(eval_window_count(*split.source, 65, seq_len), 1u);
  EXPECT_EQ(eval_window_count(*split.source, 129, seq_len), 2u);
  EXPECT_EQ(eval_window_count(*split.source, 1u << 30, seq_len), 999u / 64u);
  for (std::uint64_t i = 0; i < eval_window_count(*split.source, 1000, seq_len); ++i) {
    std::vector<std::int32_t> inputs(seq_len), targets(seq_len);
    eval_window(*split.source, i, seq_len, inputs.data(), targets.data());
    for (int t = 0; t < seq_len; ++t) {
      ASSERT_EQ(inputs[t], static_cast<std::int32_t>(i * seq_len + t));       // tokens [iT, iT+T)
      ASSERT_EQ(targets[t], static_cast<std::int32_t>(i * seq_len + t + 1));  // [iT+1, iT+T]
    }
  }
  std::vector<std::int32_t> inputs(seq_len), targets(seq_len);
  EXPECT_THROW(eval_window(*split.source, 999 / 64, seq_len, inputs.data(), targets.data()), Error);
}

TEST(ValidationSplit, IsDeterministicAndNeverEmptiesTraining) {
  const std::vector<bool> a = choose_validation_documents(10000, 0.05);
  EXPECT_EQ(a, choose_validation_documents(10000, 0.05));
  const auto chosen = std::count(a.begin(), a.end(), true);
  EXPECT_GT(chosen, 400);
  EXPECT_LT(chosen, 600);
  // A prefix of a corpus splits like the corpus.
  const std::vector<bool> prefix = choose_validation_documents(100, 0.05);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));

  EXPECT_EQ(choose_validation_documents(2, 0.0001), (std::vector<bool>{false, true}));
  EXPECT_EQ(choose_validation_documents(1, 0.5), (std::vector<bool>{false}));
  EXPECT_EQ(choose_validation_documents(3, 0.0), (std::vector<bool>{false, false, false}));
  const std::vector<bool> most = choose_validation_documents(2, 0.99);
  EXPECT_FALSE(most[0] && most[1]);
  EXPECT_THROW(choose_validation_documents(3, 1.0), Error);
  EXPECT_THROW(choose_validation_documents(3, -0.1), Error);
}

}  // namespace
}  // namespace strata
