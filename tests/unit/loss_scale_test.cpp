// fp16 loss scaling: the scaler's rules, and through the `train` executable that an overflowing
// step is skipped (weights, moments and step count untouched, data moves on) while the scale
// halves, that a clean window doubles it, and that a resume continues with the saved scale (which
// `ckpt inspect` shows with its clean-step count).
#include <gtest/gtest.h>

#include <algorithm>

#include "model/gpt.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/optimizer/loss_scale.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

PrecisionConfig precision(const std::string& compute, const std::string& loss_scale = "dynamic",
                          int window = 3, double initial = 1024) {
  return PrecisionConfig{cpu::compute_dtype_from_name(compute), loss_scale, window, initial};
}

TEST(LossScaler, OnlyFp16IsScaled) {
  for (const char* compute : {"fp32", "bf16"}) {
    LossScaler scaler = LossScaler::for_config(precision(compute, "dynamic"));
    EXPECT_EQ(scaler.scale(), 1.0);
    EXPECT_FALSE(scaler.dynamic());
    scaler.update(false);
    scaler.restore(4096, 2);
    EXPECT_EQ(scaler.scale(), 1.0);
  }
}

TEST(LossScaler, DynamicScaleHalvesOnOverflowAndDoublesAfterACleanWindow) {
  LossScaler scaler = LossScaler::for_config(precision("fp16"));
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.clean_steps(), 2);
  scaler.update(false);  // an overflow restarts the window
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.clean_steps(), 0);
  for (int i = 0; i < 3; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.clean_steps(), 0);
  // Bounds: never below 1 (then an overflow is no longer the scale's fault), never above 2^32.
  LossScaler low = LossScaler::for_config(precision("fp16", "dynamic", 1, 2));
  low.update(false);
  EXPECT_EQ(low.scale(), 1.0);
  EXPECT_FALSE(low.can_back_off());
  low.update(false);
  EXPECT_EQ(low.scale(), 1.0);
  LossScaler high = LossScaler::for_config(precision("fp16", "dynamic", 1, LossScaler::kMaxScale));
  high.update(true);
  EXPECT_EQ(high.scale(), LossScaler::kMaxScale);
  // Restore continues a saved state; a run without a dynamic scale saved clean_steps −1.
  scaler.restore(8192, 2);
  EXPECT_EQ(scaler.scale(), 8192);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 16384);
  scaler.restore(1.0, -1);
  EXPECT_EQ(scaler.scale(), 16384);
}

TEST(LossScaler, FixedScaleNeverChanges) {
  LossScaler scaler = LossScaler::for_config(precision("fp16", "1024.5"));
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_FALSE(scaler.can_back_off());
  EXPECT_EQ(scaler.scale(), 1024.5);
  scaler.update(false);
  for (int i = 0; i < 5; ++i) scaler.update(true);
  scaler.restore(2, 0);
  EXPECT_EQ(scaler.scale(), 1024.5);
}

// --- Through the trainer ---

const GptShape kShape{2, 2, 32, 16, 64};

std::string write_config(const TempDir& dir, const std::string& name, const std::string& extra) {
  const std::string path = dir / (name + ".yaml");
  std::ofstream(path)
      << "run: {name: " << name << ", dir: " << dir.str() << "/runs, seed: 5}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train}\n"
      << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 2}\n"
      << "train: {steps: 8, global_batch: 8, micro_batch: 2, eval_every: 0, log_every: 1}\n"
      << "checkpoint: {every: 0, keep: 0}\n"
      << "device: cpu\n"  // the CPU emulation of fp16, also where a GPU is present
      << extra;
  return path;
}

Checkpoint checkpoint_at(const std::string& run_dir, int step) {
  return read_checkpoint(run_dir + "/checkpoints/" + checkpoint_file_name(step),
                         ParameterLayout::for_gpt(kShape), true);
}

class LossScaleTraining : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_synthetic_dataset(dir_ / "data", 64, 20000); }
  // Runs `train` on a config named `name` with `extra` config lines; returns the run directory.
  std::string train(const std::string& name, const std::string& extra,
                    const std::string& args = "") {
    const std::string command =
        testing::bin("train") + " " + write_config(dir_, name, extra) + " " + args;
    const auto result = testing::run_command(command);
    EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
    return dir_.str() + "/runs/" + name;
  }
  TempDir dir_{"loss_scale"};
};

TEST_F(LossScaleTraining, OverflowSkipsTheStepAndHalvesTheScale) {
  // 2^28 / (2·16 positions · 4 micro-batches) per logit gradient is far past fp16's 65504, so the
  // first steps overflow until the scale has halved enough (to 2^21 on this model and data).
  const std::string run =
      train("overflow",
            "precision: {compute: fp16, loss_scale: dynamic, initial_loss_scale: 268435456}\n",
            "--set train.steps=12");
  const auto scales = testing::metric_values(run + "/metrics.jsonl", "loss_scale");
  const std::string metrics = testing::read_file(run + "/metrics.jsonl");
  ASSERT_EQ(scales.size(), 12u);
  EXPECT_EQ(scales[0], 268435456.0);
  const auto first_clean = metrics.find("\"skipped\": false");
  ASSERT_NE(first_clean, std::string::npos) << "every step overflowed";
  const int skipped = static_cast<int>(std::count(metrics.begin(), metrics.begin() + first_clean,
                                                  '\n'));  // lines before the first clean one
  ASSERT_GE(skipped, 1);
  for (int i = 1; i <= skipped; ++i) EXPECT_EQ(scales[i], scales[i - 1] / 2) << "step " << i + 1;
  EXPECT_EQ(std::count(scales.begin(), scales.end(), scales[skipped]), 12 - skipped)
      << "the window (1000) is not reached: the scale stays";

  // Weights, moments and optimizer steps stay exactly as they were; only the data moves on.
  const std::string skip_once =
      train("skip_once",
            "precision: {compute: fp16, loss_scale: dynamic, initial_loss_scale: 4294967296}\n",
            "--set train.steps=1");
  const Checkpoint after = checkpoint_at(skip_once, 1);
  std::vector<float> initial(after.params.size());
  initialize_gpt_parameters(ParameterLayout::for_gpt(kShape), kShape, 5, initial.data());
  EXPECT_EQ(after.params, initial);
  EXPECT_TRUE(
      std::all_of(after.adam_m.begin(), after.adam_m.end(), [](float m) { return m == 0; }));
  EXPECT_TRUE(
      std::all_of(after.adam_v.begin(), after.adam_v.end(), [](float v) { return v == 0; }));
  EXPECT_EQ(after.state.adam_steps, 0);
  EXPECT_EQ(after.state.step, 1);
  EXPECT_EQ(after.state.data_position, 8);
  EXPECT_EQ(after.state.loss_scale, 2147483648.0);
}

TEST_F(LossScaleTraining, OverflowAfterCleanStepsLeavesTrainedStateUntouched) {
  // Two clean steps at a fixed scale, then one with a scale that must overflow.
  const std::string config = "precision: {compute: fp16, loss_scale: 1024}\n";
  const std::string run = train("fixed", config, "--set train.steps=3 --set train.stop_after=2");
  const Checkpoint before = checkpoint_at(run, 2);
  ASSERT_EQ(before.state.adam_steps, 2);
  train("fixed", config, "--set train.steps=3 --set precision.loss_scale=1e12 --resume");
  const Checkpoint after = checkpoint_at(run, 3);
  EXPECT_EQ(after.params, before.params);
  EXPECT_EQ(after.adam_m, before.adam_m);
  EXPECT_EQ(after.adam_v, before.adam_v);
  EXPECT_EQ(after.state.adam_steps, 2);
  EXPECT_EQ(after.state.data_position, before.state.data_position + 8);
  const std::string metrics = testing::read_file(run + "/metrics.jsonl");
  EXPECT_NE(metrics.find("\"step\": 3, "), std::string::npos);
  EXPECT_NE(metrics.find("\"skipped\": true"), std::string::npos) << metrics;
}

TEST_F(LossScaleTraining, CleanWindowDoublesTheScaleAndResumeContinuesIt) {
  const std::string config =
      "precision: {compute: fp16, loss_scale: dynamic, loss_scale_window: 3, "
      "initial_loss_scale: 1024}\n";
  const std::string straight = train("straight", config);
  const auto scales = testing::metric_values(straight + "/metrics.jsonl", "loss_scale");
  EXPECT_EQ(scales, (std::vector<double>{1024, 1024, 1024, 2048, 2048, 2048, 4096, 4096}));
  EXPECT_EQ(testing::read_file(straight + "/metrics.jsonl").find("\"skipped\": true"),
            std::string::npos);

  // Stopped after 4 steps (one clean step into the second window) and resumed: the same run.
  const std::string split = train("split", config, "--set train.stop_after=4");
  const Checkpoint middle = checkpoint_at(split, 4);
  EXPECT_EQ(middle.state.loss_scale, 2048);
  EXPECT_EQ(middle.state.loss_scale_clean_steps, 1);
  const auto inspect = testing::run_command(testing::bin("ckpt") + " inspect " + split +
                                            "/checkpoints/" + checkpoint_file_name(4));
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("\nloss_scale   2048\n"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("\nclean_steps  1 "), std::string::npos) << inspect.output;
  train("split", config, "--resume");
  EXPECT_EQ(testing::metric_values(split + "/metrics.jsonl", "loss_scale"), scales);
  EXPECT_EQ(testing::metric_values(split + "/metrics.jsonl", "loss"),
            testing::metric_values(straight + "/metrics.jsonl", "loss"));
  EXPECT_EQ(checkpoint_at(split, 8).params, checkpoint_at(straight, 8).params);
}

}  // namespace
}  // namespace strata
