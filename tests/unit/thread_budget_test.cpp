// Threads per rank: the ranks of a host share its cores unless the user says otherwise, the
// config's `threads` beats OMP_NUM_THREADS, which beats the automatic share, and a malformed
// OMP_NUM_THREADS falls back to the share with a reason that says so.
#include "model/kernels/cpu/thread_budget.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace strata {
namespace {

constexpr std::nullopt_t kUnset = std::nullopt;

int auto_threads(int cores, int ranks) {
  return choose_thread_budget(cores, ranks, kUnset, kUnset).threads;
}

TEST(ThreadBudget, RanksOfAHostShareItsCores) {
  EXPECT_EQ(auto_threads(2, 1), 2);
  EXPECT_EQ(auto_threads(2, 2), 1);
  EXPECT_EQ(auto_threads(8, 1), 8);
  EXPECT_EQ(auto_threads(8, 2), 4);
  EXPECT_EQ(auto_threads(8, 4), 2);
  EXPECT_EQ(auto_threads(16, 4), 4);
  EXPECT_EQ(auto_threads(6, 4), 1);  // rounded down: 4 ranks of 2 threads would oversubscribe
  EXPECT_EQ(auto_threads(13, 2), 6);
}

TEST(ThreadBudget, MoreRanksThanCoresGetOneThreadEach) {
  EXPECT_EQ(auto_threads(2, 4), 1);
  EXPECT_EQ(auto_threads(1, 8), 1);
  EXPECT_EQ(auto_threads(4, 64), 1);
}

TEST(ThreadBudget, NonsenseCountsStillGiveOneThread) {
  EXPECT_EQ(auto_threads(0, 4), 1);
  EXPECT_EQ(auto_threads(4, 0), 4);
}

TEST(ThreadBudget, ReasonNamesTheShare) {
  EXPECT_EQ(describe(choose_thread_budget(2, 4, kUnset, kUnset)),
            "threads: 1 per rank (2 cores available / 4 ranks on this host)");
  EXPECT_EQ(describe(choose_thread_budget(1, 1, kUnset, kUnset)),
            "threads: 1 per rank (1 core available / 1 rank on this host)");
}

TEST(ThreadBudget, OmpNumThreadsBeatsTheShare) {
  const ThreadBudget budget = choose_thread_budget(2, 4, "3", kUnset);
  EXPECT_EQ(budget.threads, 3);
  EXPECT_EQ(describe(budget), "threads: 3 per rank (OMP_NUM_THREADS)");
  EXPECT_EQ(choose_thread_budget(16, 1, "1", kUnset).threads, 1);
  // A list sets nested levels; its first entry is the outermost level, the one that counts here.
  EXPECT_EQ(choose_thread_budget(16, 1, "4,2", kUnset).threads, 4);
  EXPECT_EQ(choose_thread_budget(16, 1, " 5 ", kUnset).threads, 5);
}

TEST(ThreadBudget, ConfigThreadsBeatOmpNumThreads) {
  const ThreadBudget budget = choose_thread_budget(2, 4, "3", 5);
  EXPECT_EQ(budget.threads, 5);
  EXPECT_EQ(describe(budget), "threads: 5 per rank (config threads)");
  EXPECT_EQ(choose_thread_budget(64, 1, kUnset, 2).threads, 2);
}

TEST(ThreadBudget, MalformedOmpNumThreadsIsIgnoredAndSaysSo) {
  for (const char* value : {"abc", "0", "-2", "", "2x", "1.5", ",4", "99999999999"}) {
    SCOPED_TRACE(value);
    const ThreadBudget budget = choose_thread_budget(8, 2, value, kUnset);
    EXPECT_EQ(budget.threads, 4);
    EXPECT_EQ(budget.reason, std::string("8 cores available / 2 ranks on this host; ") +
                                 "OMP_NUM_THREADS='" + value + "' ignored: not a positive integer");
  }
}

TEST(ThreadBudget, ThisProcessHasAtLeastOneCore) { EXPECT_GE(available_cores(), 1); }

}  // namespace
}  // namespace strata
