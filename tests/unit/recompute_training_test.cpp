// Activation checkpointing and bf16 through the `train` executable: selective and full
// recomputation train bitwise the run of `none` with less activation memory (as metrics.jsonl
// reports it), and bf16 trains close to, but not exactly, the fp32 run.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {
namespace {

using testing::TempDir;

class RecomputeTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_synthetic_dataset(dir_ / "data", 64, 30000);
    std::ofstream(dir_ / "config.yaml")
        << "run: {name: base, dir: " << dir_.str() << "/runs, seed: 7}\n"
        << "model: {n_layer: 3, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
        << "data: {train: " << dir_.str() << "/data/train, val: " << dir_.str() << "/data/val}\n"
        << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 2}\n"
        << "train: {steps: 6, global_batch: 8, micro_batch: 2, eval_every: 3, eval_tokens: 512, "
           "log_every: 1}\n"
        << "checkpoint: {every: 0, keep: 0}\n"
        << "device: cpu\n";  // the CPU model, also where a GPU is present
  }
  std::string train(const std::string& name, const std::string& sets) {
    const std::string command = testing::bin("train") + " " + (dir_ / "config.yaml") +
                                " --set run.name=" + name + " " + sets;
    const auto result = testing::run_command(command);
    EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
    return dir_.str() + "/runs/" + name;
  }
  static std::vector<double> metric(const std::string& run, const std::string& key) {
    return testing::metric_values(run + "/metrics.jsonl", key);
  }
  static std::vector<float> final_weights(const std::string& run) {
    const GptShape shape{3, 2, 32, 16, 64};
    return read_checkpoint(run + "/checkpoints/" + checkpoint_file_name(6),
                           ParameterLayout::for_gpt(shape), false)
        .params;
  }
  TempDir dir_{"recompute_training"};
};

TEST_F(RecomputeTraining, RecomputationTrainsTheSameRunWithLessMemory) {
  const std::string none = train("none", "--set recompute=none");
  ASSERT_EQ(metric(none, "loss").size(), 6u);
  double previous_total = 0, previous_per_layer = 0;
  for (const char* mode : {"none", "selective", "full"}) {
    SCOPED_TRACE(mode);
    const std::string run =
        mode == std::string("none") ? none : train(mode, "--set recompute=" + std::string(mode));
    EXPECT_EQ(metric(run, "loss"), metric(none, "loss"));  // 17 significant digits: bitwise
    EXPECT_EQ(metric(run, "val_loss"), metric(none, "val_loss"));
    EXPECT_EQ(final_weights(run), final_weights(none));
    const double total = metric(run, "activation_mib").back();
    const double per_layer = metric(run, "activation_mib_per_layer").back();
    EXPECT_GT(per_layer, 0);
    if (previous_total > 0) {
      EXPECT_LT(total, previous_total);
      EXPECT_LT(per_layer, previous_per_layer);
    }
    previous_total = total;
    previous_per_layer = per_layer;
  }
}

TEST_F(RecomputeTraining, Bf16TrainsCloseToFp32) {
  const std::string fp32 = train("fp32", "");
  const std::string bf16 = train("bf16", "--set precision.compute=bf16 --set recompute=full");
  const auto expected = metric(fp32, "loss"), actual = metric(bf16, "loss");
  ASSERT_EQ(actual.size(), expected.size());
  double max_relative = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    max_relative = std::max(max_relative, std::abs(actual[i] - expected[i]) / expected[i]);
  EXPECT_LT(max_relative, 2e-3);  // measured 6e-5 over these 6 steps
  EXPECT_GT(max_relative, 0.0) << "bf16 rounding was not applied";
  EXPECT_TRUE(metric(bf16, "loss_scale").empty()) << "bf16 has no loss scale";
}

}  // namespace
}  // namespace strata
