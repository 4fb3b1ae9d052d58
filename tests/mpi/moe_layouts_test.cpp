// Mixture-of-experts models on every layout the CPU backend runs: a 4-layer GPT whose blocks 1 and
// 3 have 4 experts (top-2, a capacity that drops choices, both router losses on) trains one
// process's run (loss and val_loss per step within 1e-4 relative, fp32) under dp 2, tp 2 with
// sequence parallelism, pp 2 under 1f1b, zb-h1 and zbv, ZeRO stages 2 and 3, full recomputation,
// and expert parallelism (ep 2 and 4 of dp 2 and 4, with tp and sequence parallelism, with
// pipelines, with recomputation, under ZeRO 1, 2 and 3), with the same routing figures in its
// metrics (tokens dropped, assignments per expert, router losses); in bf16 and fp16 the run of one
// process in that dtype; resumes bit-exactly (ep 4, and ep 2 under ZeRO-2, too); its checkpoint
// continues the same run on another layout (ep 4's on ep 1 and ep 2); DiLoCo workers with ep 2
// train their run of ep 1 (loss and outer gradient norm); `eval` measures the run's own val_loss
// on it and `ckpt export-hf` refuses it with one error line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;

Layout ep(Layout layout, int ep) {
  layout.ep = ep;
  return layout;
}

const std::string kExperts =
    " --set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.every=2"
    " --set model.moe.capacity_factor=1.0 --set model.moe.aux_loss=0.05"
    " --set model.moe.z_loss=0.01";

class MoeLayouts : public testing::LayoutSuite<MoeLayouts> {
 public:
  static constexpr const char* kTag = "moe_layouts";
  static constexpr int kHeads = 4;
  static Layout reference() { return {}; }
  static std::string model_keys() { return kExperts; }

 protected:
  static std::string train(const Layout& layout, const std::string& name,
                           const std::string& extra = "") {
    return run(layout, name, extra);
  }
};

TEST_F(MoeLayouts, EveryLayoutTrainsTheRunOfOneProcess) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  struct Case {
    Layout layout;
    std::string extra, tag;
  };
  Layout zbv{1, 1, 2, "zbv"};
  zbv.virtual_stages = 2;
  Layout zbv_dp2 = zbv;
  zbv_dp2.dp = 2;
  Layout interleaved_dp2{2, 1, 2, "interleaved"};
  interleaved_dp2.virtual_stages = 2;
  const std::vector<Case> cases = {
      {Layout{2, 1, 1}, "", ""},
      {Layout{1, 2, 1, "1f1b", true}, "", ""},
      {Layout{1, 1, 2}, "", ""},
      {Layout{1, 1, 2, "zb-h1"}, "", ""},
      {zbv, "", ""},
      {Layout{2, 2, 2, "1f1b", true, "full"}, "", ""},
      {Layout{2, 1, 1}, " --set parallel.zero.stage=2", "_zero2"},
      {Layout{2, 1, 2}, " --set parallel.zero.stage=3", "_zero3"},
      // Expert parallelism: the experts over the whole dp group, over part of it (two ranks hold
      // each expert), with tp and sequence parallelism, with pipelines, with recomputation.
      {ep(Layout{2, 1, 1}, 2), "", ""},
      {ep(Layout{4, 1, 1}, 4), "", ""},
      {ep(Layout{4, 1, 1}, 2), "", ""},
      {ep(Layout{2, 2, 1, "1f1b", true}, 2), "", ""},
      {ep(Layout{2, 1, 2, "zb-h1"}, 2), "", ""},
      {ep(zbv_dp2, 2), "", ""},
      {ep(interleaved_dp2, 2), "", ""},
      {ep(Layout{2, 2, 2, "1f1b", true, "selective"}, 2), "", ""},
      {ep(Layout{2, 1, 1, "1f1b", false, "full"}, 2), "", ""},
      // ZeRO under expert parallelism: sharded over the ranks holding the same experts.
      {ep(Layout{4, 1, 1}, 2), " --set parallel.zero.stage=1", "_zero1"},
      {ep(Layout{4, 1, 1}, 2), " --set parallel.zero.stage=2", "_zero2"},
      {ep(Layout{4, 1, 2}, 2), " --set parallel.zero.stage=3", "_zero3"},
  };
  for (const Case& c : cases) {
    const std::string name = c.layout.name() + c.tag;
    SCOPED_TRACE(name);
    const std::string run = train(c.layout, name, c.extra);
    expect_close(metric(run, "loss"), reference, 0, "loss");
    expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss");
    // The routing figures, summed over the ranks that hold each block: the same tokens dropped,
    // the same assignments per expert, the same router losses.
    for (const std::string key :
         {"\"h.1\": {\"aux_loss\": ", "\"h.3\": {\"aux_loss\": ", "\"z_loss\": "}) {
      const double expected = testing::logged(reference_dir_, 20, key);
      EXPECT_NEAR(testing::logged(run, 20, key), expected, 1e-4 * std::abs(expected)) << key;
    }
    for (const std::string key : {"\"dropped_fraction\": ", "\"tokens_per_expert\": ["})
      EXPECT_EQ(testing::logged(run, 20, key), testing::logged(reference_dir_, 20, key)) << key;
  }
  EXPECT_GT(testing::logged(reference_dir_, 20, "\"dropped_fraction\": "), 0.0)
      << "the capacity should drop some choices";
}

TEST_F(MoeLayouts, Bf16LayoutTrainsTheBf16RunOfOneProcess) {
  Layout single;
  single.compute = "bf16";
  const std::string reference = train(single, single.name());
  for (Layout layout : {Layout{1, 2, 2, "1f1b", true}, ep(Layout{2, 2, 1, "1f1b", true}, 2)}) {
    layout.compute = "bf16";
    const std::string run = train(layout, layout.name());
    expect_close(metric(run, "loss"), metric(reference, "loss"), 0, "bf16 loss", 1e-3);
  }
  // fp16 under its loss scaling: the experts' exchange carries the scaled gradients.
  single.compute = "fp16";
  const std::string fp16 = train(single, single.name());
  Layout layout = ep(Layout{2, 1, 1}, 2);
  layout.compute = "fp16";
  const std::string run = train(layout, layout.name());
  expect_close(metric(run, "loss"), metric(fp16, "loss"), 0, "fp16 loss", 1e-3);
}

TEST_F(MoeLayouts, ExpertParallelRunsResumeBitExactlyAndReshardToFewerRanks) {
  namespace fs = std::filesystem;
  // ZeRO-2 over the pairs holding the same experts (ep 2 of dp 4): the sharded optimizer state too.
  const Layout sharded = ep(Layout{4, 1, 1}, 2);
  const std::string zero2 = " --set parallel.zero.stage=2";
  const std::string sharded_straight = train(sharded, "ep_zero2_straight", zero2);
  train(sharded, "ep_zero2_split", zero2 + " --set train.stop_after=10");
  const std::string sharded_second = train(sharded, "ep_zero2_split", zero2 + " --resume");
  EXPECT_EQ(metric(sharded_second, "loss"), metric(sharded_straight, "loss"));  // exact

  const Layout layout = ep(Layout{4, 1, 1}, 4);
  const std::string straight = train(layout, "ep_straight");
  const std::string first = train(layout, "ep_split", " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  const std::string second = train(layout, "ep_split", " --resume");
  EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
  // The experts written by four ranks, read by one (ep 1) and by two (ep 2): the same run.
  for (const Layout& moved : {Layout{}, ep(Layout{2, 1, 1}, 2)}) {
    const std::string name = "ep_moved_" + moved.name();
    fs::create_directories(dir_->str() + "/runs/" + name);
    const std::string run = train(moved, name, " --resume " + checkpoint);
    expect_close(metric(run, "loss"), metric(reference_dir_, "loss"), 10, "loss after resume");
  }
}

TEST_F(MoeLayouts, ResumesBitExactlyAndCheckpointsMoveBetweenLayouts) {
  namespace fs = std::filesystem;
  const Layout layout{1, 2, 2, "1f1b", true};
  const std::string straight = train(layout, "straight");
  const std::string first = train(layout, "split", " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  const std::string second = train(layout, "split", " --resume");
  EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
  // The same checkpoint, on one process and under dp 2: the run of one process goes on.
  for (const Layout& moved : {Layout{}, Layout{2, 1, 1}}) {
    const std::string name = "moved_" + moved.name();
    fs::create_directories(dir_->str() + "/runs/" + name);
    const std::string run = train(moved, name, " --resume " + checkpoint);
    expect_close(metric(run, "loss"), metric(reference_dir_, "loss"), 10, "loss after resume");
  }
}

TEST_F(MoeLayouts, DilocoWorkersUnderExpertParallelismTrainTheirRunWithoutIt) {
  // Two DiLoCo workers of dp 2: with the experts split over each worker's two ranks (the outer
  // state and the averaging per rank's share of its own experts), the run of ep 1.
  const auto reference = metric(
      testing::train_diloco_workers(*dir_, Layout{2, 1, 1}, "diloco_ep1", 2, kExperts), "loss");
  ASSERT_EQ(reference.size(), 20u);
  const std::string run =
      testing::train_diloco_workers(*dir_, ep(Layout{2, 1, 1}, 2), "diloco_ep2", 2, kExperts);
  expect_close(metric(run, "loss"), reference, 0, "loss");
  // Each logical element counted once in the outer gradient's norm.
  const std::string ep1 = dir_->str() + "/runs/diloco_ep1";
  ASSERT_EQ(metric(ep1, "outer_grad_norm").size(), 4u);
  expect_close(metric(run, "outer_grad_norm"), metric(ep1, "outer_grad_norm"), 0,
               "outer_grad_norm");
}

TEST_F(MoeLayouts, ToolsEvaluateAndRefuseTheHuggingFaceExport) {
  const std::string checkpoint = reference_dir_ + "/checkpoints/step_00000020.h5";
  // eval reads the model the run trained: the run's own last val_loss.
  const auto evaluated = testing::run_command(testing::bin("eval") + " --checkpoint " + checkpoint +
                                              " --data " + dir_->str() + "/data/val");
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  ASSERT_EQ(evaluated.output.rfind("val_loss ", 0), 0u) << evaluated.output;
  EXPECT_NEAR(std::strtod(evaluated.output.c_str() + 9, nullptr),
              metric(reference_dir_, "val_loss").back(), 1e-4);
  const auto exported = testing::run_command(testing::bin("ckpt") + " export-hf " + checkpoint +
                                             " " + dir_->str() + "/hf");
  EXPECT_NE(exported.status, 0);
  EXPECT_NE(exported.output.find("error: checkpoint '" + checkpoint +
                                 "' is a mixture-of-experts model (model.moe.experts 4): GPT-2 "
                                 "has no experts"),
            std::string::npos)
      << exported.output;
}

}  // namespace
}  // namespace strata
