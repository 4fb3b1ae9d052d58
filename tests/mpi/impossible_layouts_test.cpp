// Impossible layouts stop before any work, end to end under mpirun: a world not divisible by
// tp·pp, a tp that does not divide n_head, or more pipeline stages than layers each end `train`
// with a non-zero exit status and one line, `error: ...` naming the reason; no run directory is
// created, and an existing run asked to resume on such a layout keeps its checkpoints and
// metrics byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string write_config(const TempDir& dir) {
  const std::string path = dir / "config.yaml";
  std::ofstream(path)
      << "run: {name: existing, dir: " << dir.str() << "/runs, seed: 3}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 1}\n"
      << "train: {steps: 4, global_batch: 8, micro_batch: 2, eval_every: 2, "
         "eval_tokens: 256, log_every: 1}\n"
      << "checkpoint: {every: 2, keep: 0}\n";
  return path;
}

// `train` on `ranks` ranks. mpirun's own report of a rank's non-zero exit is silenced (Open MPI's
// --quiet), so the output is train's alone.
testing::CommandResult train(int ranks, const std::string& config, const std::string& args) {
  return testing::run_command(testing::mpirun(ranks) + "--quiet " + testing::bin("train") + " " +
                              config + " " + args);
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files[entry.path().string()] = testing::read_file(entry.path());
  return files;
}

struct ImpossibleLayout {
  int ranks;
  std::string overrides;
  std::string reason;
};

TEST(ImpossibleLayouts, StopWithOneErrorLineAndTouchNothing) {
  TempDir dir("impossible_layouts");
  testing::write_synthetic_dataset(dir / "data", 64, 20000);
  const std::string config = write_config(dir);
  const std::string existing = dir.str() + "/runs/existing";
  const auto trained = train(1, config, "");
  ASSERT_EQ(trained.status, 0) << trained.output;
  ASSERT_TRUE(fs::exists(existing + "/checkpoints/step_00000004.h5"));
  const auto before = snapshot(existing);

  // The model has n_layer 2 and n_head 2.
  const std::vector<ImpossibleLayout> layouts = {
      {3, "--set parallel.tp=2",
       "world size 3 is not divisible by parallel.tp*parallel.pp (2*1=2)"},
      {6, "--set parallel.tp=2 --set parallel.pp=2",
       "world size 6 is not divisible by parallel.tp*parallel.pp (2*2=4)"},
      {4, "--set parallel.tp=4", "'parallel.tp' (4) must divide model.n_head (2)"},
      {3, "--set parallel.pp=3", "'parallel.pp' (3) must be <= model.n_layer (2)"},
      {2, "--set parallel.tp=2 --set parallel.zero.stage=1",
       "'parallel.zero.stage' (1) shards the training state over the data-parallel ranks, but "
       "this layout has dp 1"},
  };
  for (const ImpossibleLayout& layout : layouts) {
    SCOPED_TRACE(std::to_string(layout.ranks) + " ranks, " + layout.overrides);
    // A fresh run, and the existing one resumed on the new layout.
    for (const std::string& args :
         {layout.overrides + " --set run.name=fresh", layout.overrides + " --resume"}) {
      const auto result = train(layout.ranks, config, args);
      EXPECT_NE(result.status, 0) << result.output;
      EXPECT_EQ(result.output.rfind("error: ", 0), 0u) << result.output;
      EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
      EXPECT_NE(result.output.find(layout.reason), std::string::npos) << result.output;
    }
    EXPECT_FALSE(fs::exists(dir.str() + "/runs/fresh"));
    EXPECT_EQ(snapshot(existing), before);
  }
}

}  // namespace
}  // namespace strata
