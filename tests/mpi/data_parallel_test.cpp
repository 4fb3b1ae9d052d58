// Data parallelism equals one process: 2 and 4 ranks under mpirun train the same run as 1 rank,
// loss per step within 1e-5 relative (only the order of floating-point sums differs), and the
// all-reduce volume in metrics matches the analytic ring count.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;

std::string write_config(const TempDir& dir, const std::string& name) {
  const std::string path = dir / (name + ".yaml");
  std::ofstream(path)
      << "run: {name: " << name << ", dir: " << dir.str() << "/runs, seed: 3}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 4}\n"
      << "train: {steps: 20, global_batch: 16, micro_batch: 2, eval_every: 10, "
         "eval_tokens: 2048, log_every: 10}\n"
      << "checkpoint: {every: 0, keep: 1}\n"
      << "device: cpu\n";  // the CPU trainer, also where a GPU is present
  return path;
}

std::vector<double> train_losses(const TempDir& dir, int ranks, const std::string& key = "loss") {
  const std::string name = "dp" + std::to_string(ranks);
  const std::string command =
      testing::mpirun(ranks) + testing::bin("train") + " " + write_config(dir, name);
  const auto result = testing::run_command(command);
  EXPECT_EQ(result.status, 0) << result.output;
  return testing::metric_values(dir.str() + "/runs/" + name + "/metrics.jsonl", key);
}

TEST(DataParallel, TwoAndFourRanksMatchOneProcess) {
  TempDir dir("dp");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  const auto reference = train_losses(dir, 1);
  ASSERT_EQ(reference.size(), 20u);
  for (int ranks : {2, 4}) {
    const auto losses = train_losses(dir, ranks);
    ASSERT_EQ(losses.size(), reference.size()) << ranks << " ranks";
    for (std::size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], reference[i], 1e-5 * std::abs(reference[i]))
          << ranks << " ranks, step " << i + 1;
    const auto val = testing::metric_values(
        dir.str() + "/runs/dp" + std::to_string(ranks) + "/metrics.jsonl", "val_loss");
    const auto val_reference =
        testing::metric_values(dir.str() + "/runs/dp1/metrics.jsonl", "val_loss");
    ASSERT_EQ(val.size(), val_reference.size());
    for (std::size_t i = 0; i < val.size(); ++i)
      EXPECT_NEAR(val[i], val_reference[i], 1e-5 * val_reference[i]);
  }
}

TEST(DataParallel, CommunicationVolumeMatchesTheRingAllReduceCount) {
  TempDir dir("dpcomm");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  train_losses(dir, 4);
  // Per step: one all-reduce of the fp32 gradients plus one of the loss (a double); a ring sends
  // 2·(n−1)/n of each buffer. (The stop-flag agreement happens after the step's figures are taken.)
  const std::size_t params = ParameterLayout::for_gpt(GptShape{2, 2, 32, 16, 64}).total();
  const auto lines = testing::read_file(dir.str() + "/runs/dp4/metrics.jsonl");
  const std::string second_step = lines.substr(lines.find("{\"step\": 2,"));
  const auto at = second_step.find("\"intra_node\": ");
  ASSERT_NE(at, std::string::npos);
  const double bytes = std::strtod(second_step.c_str() + at + 14, nullptr);
  const double gradients = 2.0 * 3 * (static_cast<double>(params) * 4) / 4;
  const double loss = 2.0 * 3 * 8 / 4;
  EXPECT_EQ(bytes, gradients + loss);
}

}  // namespace
}  // namespace strata
