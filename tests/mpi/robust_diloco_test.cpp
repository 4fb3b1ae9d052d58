// Robust DiLoCo averaging end to end (train/diloco/diloco.h, docs/ARCHITECTURE.md §2 "Robust
// averaging"): four in-job workers, one of which misbehaves at every sync through the test hook
// poison_outer. With the screen off, an outer gradient scaled by 1e3 ruins the mean's model, while
// trimmed_mean and centered_clip end within 2% of the clean group's val_loss, also with int8
// compression, two fragments and overlap; with the screen on (the default), the scaled worker and
// a non-finite one are left out of every sync, named in the sync's line and metrics, and even the
// mean ends within 2%.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::Layout;
using testing::metric;
using testing::read_file;
using testing::run_command;

// Four workers of one rank each; 20 steps, a sync every 5.
constexpr const char* kGroup =
    " --set diloco.enabled=true --set diloco.workers=4 --set diloco.inner_steps=5";

class RobustDiloco : public testing::LayoutSuite<RobustDiloco> {
 public:
  static constexpr const char* kTag = "robust_diloco";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{4}; }  // the four workers, clean
  static std::string model_keys() { return kGroup; }

 protected:
  // A run of the clean group's config with `extra`, worker `poison` misbehaving as the hook says.
  static std::string poisoned(const std::string& name, const std::string& poison,
                              const std::string& extra) {
    const std::string command = "STRATA_TEST_HOOKS=poison_outer=" + poison + " " +
                                testing::mpirun(4) + testing::bin("train") + " " + dir_->str() +
                                "/config.yaml" + Layout{4}.overrides() + kGroup +
                                " --set run.name=" + name + extra;
    const auto result = run_command(command);
    EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
    output_ = result.output;
    return dir_->str() + "/runs/" + name;
  }
  static inline std::string output_;  // what the last poisoned run printed

  // The run's last val_loss (NaN when it has none or it is not a number).
  static double final_val_loss(const std::string& run) {
    const std::vector<double> losses = metric(run, "val_loss");
    return losses.empty() ? std::nan("") : losses.back();
  }
  static bool within_2_percent(double loss, double clean) {
    return std::isfinite(loss) && std::fabs(loss - clean) <= 0.02 * clean;
  }
  // The metrics lines of the syncs.
  static std::vector<std::string> sync_lines(const std::string& run) {
    std::vector<std::string> lines;
    std::istringstream in(read_file(run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);)
      if (line.find("\"outer_step\": ") != std::string::npos) lines.push_back(line);
    return lines;
  }
};

TEST_F(RobustDiloco, AScaledWorkerRuinsTheMeanButNotTheRobustRules) {
  const double clean = final_val_loss(reference_dir_);
  ASSERT_TRUE(std::isfinite(clean));
  const std::string screen_off = " --set diloco.outlier_factor=0";
  const double mean = final_val_loss(poisoned("mean_scaled", "scale:3", screen_off));
  const double trimmed = final_val_loss(
      poisoned("trimmed_scaled", "scale:3", screen_off + " --set diloco.aggregation=trimmed_mean"));
  const double clipped = final_val_loss(poisoned(
      "clipped_scaled", "scale:3", screen_off + " --set diloco.aggregation=centered_clip"));
  EXPECT_FALSE(within_2_percent(mean, clean)) << "mean " << mean << ", clean " << clean;
  EXPECT_TRUE(within_2_percent(trimmed, clean))
      << "trimmed_mean " << trimmed << ", clean " << clean;
  EXPECT_TRUE(within_2_percent(clipped, clean))
      << "centered_clip " << clipped << ", clean " << clean;
}

TEST_F(RobustDiloco, RobustRulesWorkWithCompressionFragmentsAndOverlap) {
  const std::string more =
      " --set diloco.compression=int8 --set diloco.fragments=2 --set diloco.overlap=true "
      "--set diloco.inner_steps=4";
  const double clean =
      final_val_loss(testing::train(*dir_, Layout{4}, "streaming_clean", kGroup + more));
  for (const char* rule : {"trimmed_mean", "centered_clip"}) {
    const std::string run =
        poisoned(std::string("streaming_") + rule, "scale:1",
                 more + " --set diloco.outlier_factor=0" + " --set diloco.aggregation=" + rule);
    EXPECT_TRUE(within_2_percent(final_val_loss(run), clean))
        << rule << " " << final_val_loss(run) << ", clean " << clean;
    EXPECT_EQ(sync_lines(run).size(), 10u) << rule;  // 5 periods, 2 fragments each
  }
}

TEST_F(RobustDiloco, TheScreenLeavesOutAScaledOrNonFiniteWorkerAndNamesIt) {
  const double clean = final_val_loss(reference_dir_);
  const std::string scaled = poisoned("screened_scaled", "scale:3", "");
  EXPECT_TRUE(within_2_percent(final_val_loss(scaled), clean))
      << final_val_loss(scaled) << ", clean " << clean;
  const std::vector<std::string> lines = sync_lines(scaled);
  ASSERT_EQ(lines.size(), 4u);
  for (const std::string& line : lines)
    EXPECT_NE(line.find("\"left_out\": [{\"worker\": 3, \"why\": \"norm "), std::string::npos)
        << line;
  EXPECT_NE(output_.find("| left out worker 3 (norm "), std::string::npos) << output_;

  const std::string nan = poisoned("screened_nan", "nan:0", "");
  EXPECT_TRUE(within_2_percent(final_val_loss(nan), clean))
      << final_val_loss(nan) << ", clean " << clean;
  for (const std::string& line : sync_lines(nan))
    EXPECT_NE(line.find("{\"worker\": 0, \"why\": \"non-finite outer gradient\"}"),
              std::string::npos)
        << line;
  // A clean group leaves nobody out.
  for (const std::string& line : sync_lines(reference_dir_))
    EXPECT_EQ(line.find("left_out"), std::string::npos) << line;
}

}  // namespace
}  // namespace strata
