// TensorBoard reads what `train` writes: a 4-step run, then the same run resumed from its step-2
// checkpoint (steps 3 and 4 written again, into a second event file), checked against
// metrics.jsonl by tests/python/tensorboard_read.py with TensorBoard's own reader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(TensorBoard, ReadsTheScalarsOfEveryMetricsLineOfAResumedRun) {
  const std::string python = testing::source_dir() + "/.venv-test/bin/python";
  ASSERT_TRUE(fs::exists(python))
      << python << " is missing: run scripts/setup_python.sh (it makes .venv-test, with "
      << "TensorBoard from PyPI, which this test reads the event files with)";
  testing::TempDir dir("tensorboard_read");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  const std::string config = dir / "run.yaml";
  std::ofstream(config)
      << "run: {name: tb, dir: " << dir.str() << "/runs, seed: 5}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "train: {steps: 4, global_batch: 8, micro_batch: 2, eval_every: 2, eval_tokens: 2048}\n"
      << "checkpoint: {every: 2, keep: 0}\n"
      << "device: cpu\n";
  const std::string run = dir / "runs/tb";
  const std::string train = testing::bin("train") + " " + config;

  const auto first = testing::run_command(train);
  ASSERT_EQ(first.status, 0) << first.output;
  const auto resumed =
      testing::run_command(train + " --resume " + run + "/checkpoints/step_00000002.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(run + "/tensorboard"))
    event_files += entry.path().filename().string().starts_with("events.out.tfevents.") ? 1 : 0;
  EXPECT_EQ(event_files, 2);

  const auto read = testing::run_command(python + " " + testing::source_dir() +
                                         "/tests/python/tensorboard_read.py " + run);
  EXPECT_EQ(read.status, 0) << read.output;
  EXPECT_NE(read.output.find("tags match metrics.jsonl"), std::string::npos) << read.output;
}

}  // namespace
}  // namespace strata
