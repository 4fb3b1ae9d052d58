// Kill -9 at any moment, bounded for CI: tests/chaos/chaos.py runs each variant (tp 2 x dp 2,
// ZeRO-3, DiLoCo, AdamW's state offloaded to disk) on 4 ranks, SIGKILLs one rank at seeded moments
// (some aimed at a checkpoint write), and resumes until the run completes; every trial must end
// bitwise equal to the uninterrupted run, final checkpoint and loss trace alike. The longer
// benchmark is tests/chaos/chaos.sh (docs/CHAOS.md).
#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

TEST(Chaos, EveryKilledAndResumedRunEndsBitwiseEqualToTheUninterruptedOne) {
  testing::TempDir dir("chaos");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  const int kills_per_variant = 2;
  const auto r = testing::run_command(
      "python3 " + testing::source_dir() + "/tests/chaos/chaos.py --build " + testing::bin("..") +
      " --work " + (dir / "work") + " --data " + (dir / "data") + " --kills " +
      std::to_string(kills_per_variant) + " --seed 3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("chaos: 8 kills"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", 0 failed"), std::string::npos) << r.output;
  // Not vacuous: some attempts continued from a checkpoint rather than starting again.
  const auto resumes = r.output.find(" resumes, ");
  ASSERT_NE(resumes, std::string::npos) << r.output;
  EXPECT_GT(std::stoi(r.output.substr(r.output.rfind(", ", resumes) + 2)), 0) << r.output;
  // Each variant's trials all matched.
  for (const std::string variant : {"tp2_dp2", "zero3", "diloco", "offload_disk"})
    EXPECT_NE(r.output.find("| " + variant + " |"), std::string::npos) << r.output;
  std::cout << r.output;
}

}  // namespace
}  // namespace strata
