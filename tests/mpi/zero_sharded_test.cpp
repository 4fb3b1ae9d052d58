// ZeRO stages 2 (gradients sharded, reduce-scattered segment by segment as the backward passes
// produce them) and 3 (weights sharded too, gathered per segment when used;
// parallel/sharded_parameters.h) train the run of stage 0: at dp 2 and 4, at (dp 2, tp 2, pp 2)
// with both schedules, with sequence parallelism and full recomputation, with both gradient
// reduction policies, with fp16 dynamic loss scaling (the same steps skipped) and bf16; they
// resume bit-exactly; a stage-3 checkpoint resumes under stage 0 on one rank and under stage 2 on
// (dp 2, tp 2); rank 0's bytes per step are the analytic count; the memory account is the formula.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/parameter_layout.h"
#include "tests/mpi/layout_runs.h"
#include "tests/unit/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;
using testing::train;

std::string stage(int s) { return " --set parallel.zero.stage=" + std::to_string(s); }
const std::string kPerMicroBatch = " --set parallel.zero.gradient_reduction=micro_batch";

class ZeroSharded : public testing::LayoutSuite<ZeroSharded> {
 public:
  static constexpr const char* kTag = "zero_sharded";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }
};

TEST_F(ZeroSharded, Stages2And3TrainTheRunOfStage0) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  const std::pair<Layout, std::string> runs[] = {
      {Layout{2, 1, 1}, stage(2)},
      {Layout{4, 1, 1}, stage(2) + kPerMicroBatch},
      {Layout{2, 2, 2}, stage(2)},
      {Layout{2, 2, 2, "gpipe"}, stage(2) + kPerMicroBatch},
      {Layout{2, 2, 1, "1f1b", true}, stage(2)},
      {Layout{2, 1, 1}, stage(3)},
      {Layout{4, 1, 1}, stage(3)},
      {Layout{2, 2, 2}, stage(3) + kPerMicroBatch},
      {Layout{2, 2, 2, "gpipe"}, stage(3)},
      {Layout{2, 2, 1, "1f1b", true}, stage(3)},
      {Layout{4, 1, 2, "1f1b", false, "full"}, stage(3)},
      {Layout{2, 2, 2, "1f1b", true, "full"}, stage(3)},
  };
  int index = 0;
  for (const auto& [layout, settings] : runs) {
    SCOPED_TRACE(layout.name() + settings);
    const std::string run =
        train(*dir_, layout, "sharded_" + std::to_string(index++) + "_" + layout.name(), settings);
    expect_close(metric(run, "loss"), reference, 0, "loss");
    expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss");
  }
}

TEST_F(ZeroSharded, Fp16AndBf16FollowStage0) {
  for (const std::string compute : {"fp16", "bf16"}) {
    SCOPED_TRACE(compute);
    Layout single;
    single.compute = compute;
    const std::string scale =
        compute == "fp16" ? " --set precision.initial_loss_scale=4294967296" : "";
    const std::string reference = train(*dir_, single, "sharded0_" + single.name(), scale);
    for (int s : {2, 3}) {
      Layout layout{2, 2, 2};
      layout.compute = compute;
      const std::string run = train(
          *dir_, layout, "sharded" + std::to_string(s) + "_" + layout.name(), stage(s) + scale);
      if (compute == "fp16") {
        EXPECT_EQ(metric(run, "loss_scale"), metric(reference, "loss_scale"));
        const auto scales = metric(reference, "loss_scale");
        ASSERT_EQ(scales.size(), 20u);
        EXPECT_LT(scales.back(), scales.front()) << "no step overflowed: the test checks nothing";
      }
      expect_close(metric(run, "loss"), metric(reference, "loss"), 0, "loss", 1e-3);
    }
  }
}

TEST_F(ZeroSharded, EachStageResumesBitExactly) {
  namespace fs = std::filesystem;
  for (int s : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(s));
    const Layout layout{2, 1, 2};
    const std::string tag = "sharded" + std::to_string(s);
    const std::string straight = train(*dir_, layout, tag + "_straight", stage(s));
    const std::string first =
        train(*dir_, layout, tag + "_split", stage(s) + " --set train.stop_after=10");
    ASSERT_TRUE(fs::exists(first + "/checkpoints/step_00000010.h5"));
    const std::string second = train(*dir_, layout, tag + "_split", stage(s) + " --resume");
    EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
    EXPECT_EQ(metric(second, "val_loss"), metric(straight, "val_loss"));
  }
}

TEST_F(ZeroSharded, AStage3CheckpointResumesUnderOtherStagesAndLayouts) {
  namespace fs = std::filesystem;
  const auto reference = metric(reference_dir_, "loss");
  const std::string first =
      train(*dir_, Layout{4, 1, 1}, "sharded3_written", stage(3) + " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  const std::pair<Layout, int> resumes[] = {{Layout{1, 1, 1}, 0}, {Layout{2, 2, 1}, 2}};
  for (const auto& [layout, s] : resumes) {
    SCOPED_TRACE("resumed at " + layout.name() + " stage " + std::to_string(s));
    const std::string name = "sharded3_resumed_" + layout.name() + "_" + std::to_string(s);
    fs::create_directories(dir_->str() + "/runs/" + name);
    const std::string run = train(*dir_, layout, name, stage(s) + " --resume " + checkpoint);
    expect_close(metric(run, "loss"), reference, 10, "loss after resume");
  }
}

}  // namespace
}  // namespace strata
