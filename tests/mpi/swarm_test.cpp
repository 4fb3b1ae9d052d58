// SWARM parallelism (train/swarm/) end to end: peers, each its own `train` process started one by
// one, meet in a file store. With one peer per stage, routing fixed and a target batch of one
// global batch, the swarm trains the run of Strata's GPipe pipeline of the same untied model
// (unclipped: the stages clip apart): the same loss at every step and the same val_loss, to 1e-4.
// Bad swarm settings are one `error:` line.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/mpi/layout_runs.h"
#include "tests/support/background_process.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::Background;
using testing::Layout;
using testing::metric;
using testing::run_command;
using testing::TempDir;

// Every run here: the layout suites' config (4 layers, 20 steps of 16 sequences), untied and
// unclipped (a swarm's stages clip by their own norms, a pipeline by the global one).
constexpr const char* kUntied = " --set model.tie_embeddings=false --set optimizer.grad_clip=0";
constexpr const char* kStages = "[1,2,1]";

class SwarmRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("swarm");
    testing::write_synthetic_dataset(*dir_ / "data", 64, 40000);
    testing::write_layout_config(*dir_, 4);
    Layout gpipe;
    gpipe.pp = 3;
    gpipe.schedule = "gpipe";
    reference_dir_ = testing::train(*dir_, gpipe, "gpipe",
                                    std::string(kUntied) + " --set parallel.pp_layers=" + kStages);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // The command of a peer of the swarm `name` serving `stage` (-1: auto).
  static std::string peer_command(const std::string& name, int stage, const std::string& run,
                                  const std::string& extra = "") {
    return testing::bin("train") + " " + dir_->str() + "/config.yaml" + kUntied +
           " --set swarm.join=file://" + dir_->str() + "/store_" + name +
           " --set swarm.stages=" + kStages + " --set swarm.routing=fixed --set swarm.stage=" +
           (stage < 0 ? std::string("auto") : std::to_string(stage)) + " --set run.name=" + run +
           " --set threads=1" + extra;
  }
  static std::string run_dir(const std::string& run) { return dir_->str() + "/runs/" + run; }
  static std::string log(const std::string& run) { return dir_->str() + "/" + run + ".log"; }

  static inline TempDir* dir_ = nullptr;
  static inline std::string reference_dir_;
};

TEST_F(SwarmRuns, OnePeerPerStageTrainsThePipelineRun) {
  // Started one by one, the servers first; the driver (stage 0) finds them in the store.
  std::vector<std::unique_ptr<Background>> peers;
  for (int stage : {2, 1, 0}) {
    const std::string run = "one_per_stage_" + std::to_string(stage);
    peers.push_back(
        std::make_unique<Background>(peer_command("one_per_stage", stage, run), log(run)));
  }
  for (auto& peer : peers) EXPECT_EQ(peer->wait(), 0) << peer->output();
  const std::string driver = run_dir("one_per_stage_0");
  testing::expect_close(metric(driver, "loss"), metric(reference_dir_, "loss"), 0, "loss per step");
  testing::expect_close(metric(driver, "val_loss"), metric(reference_dir_, "val_loss"), 0,
                        "val_loss");
  // Every stage made the run's 20 steps.
  for (int stage : {1, 2})
    EXPECT_EQ(metric(run_dir("one_per_stage_" + std::to_string(stage)), "stage").size(), 20u);
}

TEST_F(SwarmRuns, BadSwarmsAreOneErrorLine) {
  const auto expect_error = testing::expect_one_error_line;
  // A tied model cannot be split into stages that step apart.
  expect_error(peer_command("bad", 0, "tied", " --set model.tie_embeddings=true"),
               "model.tie_embeddings");
  expect_error(peer_command("bad", 0, "stages", " --set swarm.stages=[1,2]"), "swarm.stages");
  expect_error(peer_command("bad", 3, "stage"), "swarm.stage");
  expect_error(testing::mpirun(2) + peer_command("bad", 0, "two_ranks"), "one process");
  // The swarm's first peer sets its settings; a peer of another model is refused.
  Background server(peer_command("settings", 1, "settings_first", " --set swarm.timeout=2"),
                    log("settings_first"));
  // Its settings are in the store once it says where it serves.
  for (int i = 0; i < 200 && testing::read_file(log("settings_first")).find("serves stage") ==
                                 std::string::npos;
       ++i)
    ::usleep(50000);
  expect_error(peer_command("settings", 2, "settings_second", " --set optimizer.lr=1e-2"),
               "optimizer.lr is 0.01 here but 0.003 in the swarm");
  // A stage takes one peer for now.
  expect_error(peer_command("settings", 1, "settings_same_stage"), "already has a peer");
}

}  // namespace
}  // namespace strata
