// The zero-bubble schedules (each backward split into B, the input gradient, and W, the weight
// gradients): zb-h1 (W moved into 1F1B's bubbles, 1F1B's paired exchanges) and zb-h2 (up to
// 2pp - 1 micro-batches in flight, single transfers over sends that queue) each train the run of
// one process (loss per step within 1e-4 relative, fp32): at pp 4, at (dp 2, tp 2, pp 2) with
// sequence parallelism, with recomputation, under ZeRO stages 2 and 3; in bf16 the bf16 run of
// one process; they resume bit-exactly; checkpoints move between schedules (zb-h1's resumed
// under 1f1b, gpipe and zb-h2, 1f1b's under zb-h1) and continue the same run; and DiLoCo workers
// of zero-bubble stages train their run under 1f1b.
#include <gtest/gtest.h>

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
using testing::train;

class PipelineSchedules : public testing::LayoutSuite<PipelineSchedules> {
 public:
  static constexpr const char* kTag = "schedules";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }
};

Layout zb_h1(int dp, int tp, int pp, bool sequence_parallel = false,
             const std::string& recompute = "none") {
  return Layout{dp, tp, pp, "zb-h1", sequence_parallel, recompute};
}

Layout with_schedule(Layout layout, const std::string& schedule) {
  layout.schedule = schedule;
  return layout;
}

const std::vector<std::string> kZeroBubble = {"zb-h1", "zb-h2"};

TEST_F(PipelineSchedules, ZeroBubbleTrainsTheRunOfOneProcess) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  struct Case {
    Layout layout;
    std::string zero;  // extra overrides
  };
  const std::vector<Case> cases = {
      {zb_h1(1, 1, 4), ""},
      {zb_h1(2, 2, 2, true), ""},
      {zb_h1(1, 2, 2, false, "full"), ""},
      {zb_h1(2, 1, 2, false, "selective"), ""},
      {zb_h1(2, 1, 2), " --set parallel.zero.stage=2"},
      {zb_h1(2, 1, 2), " --set parallel.zero.stage=3"},
  };
  for (const std::string& schedule : kZeroBubble) {
    for (const Case& c : cases) {
      const Layout layout = with_schedule(c.layout, schedule);
      const std::string name =
          layout.name() + (c.zero.empty() ? "" : "_zero" + c.zero.substr(c.zero.size() - 1));
      SCOPED_TRACE(name);
      const std::string run = train(*dir_, layout, name, c.zero);
      expect_close(metric(run, "loss"), reference, 0, "loss");
      expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss");
    }
  }
}

TEST_F(PipelineSchedules, ZeroBubbleTrainsTheBf16RunOfOneProcess) {
  Layout single;
  single.compute = "bf16";
  const std::string reference = train(*dir_, single, single.name());
  for (const std::string& schedule : kZeroBubble) {
    Layout layout = with_schedule(zb_h1(1, 2, 2, true), schedule);
    layout.compute = "bf16";
    SCOPED_TRACE(layout.name());
    const std::string run = train(*dir_, layout, layout.name());
    // As for any layout in bf16 (parallel_layouts_test): fp32 reduction-order differences flip
    // some roundings to bf16's 8 significant bits.
    expect_close(metric(run, "loss"), metric(reference, "loss"), 0, "bf16 loss", 1e-3);
  }
}

TEST_F(PipelineSchedules, ZeroBubbleResumesBitExactly) {
  namespace fs = std::filesystem;
  for (const std::string& schedule : kZeroBubble) {
    SCOPED_TRACE(schedule);
    const Layout layout = with_schedule(zb_h1(1, 1, 4), schedule);
    const std::string straight = train(*dir_, layout, schedule + "_straight");
    const std::string first =
        train(*dir_, layout, schedule + "_split", " --set train.stop_after=10");
    ASSERT_TRUE(fs::exists(first + "/checkpoints/step_00000010.h5"));
    const std::string second = train(*dir_, layout, schedule + "_split", " --resume");
    EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
    EXPECT_EQ(metric(second, "val_loss"), metric(straight, "val_loss"));
  }
}

TEST_F(PipelineSchedules, CheckpointsMoveBetweenSchedules) {
  namespace fs = std::filesystem;
  const auto reference = metric(reference_dir_, "loss");
  const std::string zb = train(*dir_, zb_h1(2, 1, 2), "zb_written", " --set train.stop_after=10");
  Layout one_f_one_b{1, 1, 2};
  const std::string written_1f1b =
      train(*dir_, one_f_one_b, "1f1b_written", " --set train.stop_after=10");
  struct Resume {
    std::string checkpoint;
    Layout layout;
  };
  Layout gpipe{1, 1, 4, "gpipe"};
  const std::vector<Resume> resumes = {
      {zb + "/checkpoints/step_00000010.h5", Layout{2, 1, 2}},
      {zb + "/checkpoints/step_00000010.h5", gpipe},
      {zb + "/checkpoints/step_00000010.h5", with_schedule(zb_h1(2, 2, 2, true), "zb-h2")},
      {written_1f1b + "/checkpoints/step_00000010.h5", zb_h1(1, 2, 4)},
  };
  for (const Resume& r : resumes) {
    ASSERT_TRUE(fs::exists(r.checkpoint)) << r.checkpoint;
    const std::string name = "moved_" + r.layout.name();
    SCOPED_TRACE(name);
    fs::create_directories(dir_->str() + "/runs/" + name);
    const std::string run = train(*dir_, r.layout, name, " --resume " + r.checkpoint);
    expect_close(metric(run, "loss"), reference, 10, "loss after resume");
  }
}

TEST_F(PipelineSchedules, DilocoWorkersRunZeroBubbleStages) {
  // Two DiLoCo workers of two pipeline stages each: the workers' runs under zb-h1 and zb-h2 are
  // their run under 1f1b (the outer loop sees only the weights the inner steps leave).
  const auto run = [&](const std::string& schedule) {
    return testing::train_diloco_workers(*dir_, with_schedule(Layout{1, 1, 2}, schedule),
                                         "diloco_" + schedule);
  };
  const auto one_f_one_b = metric(run("1f1b"), "loss");
  ASSERT_EQ(one_f_one_b.size(), 20u);
  for (const std::string& schedule : kZeroBubble) {
    SCOPED_TRACE(schedule);
    expect_close(metric(run(schedule), "loss"), one_f_one_b, 0, "loss");
  }
}

}  // namespace
}  // namespace strata
