// Schedules of several chunks of layers per pipeline rank (parallel.virtual_stages): interleaved
// (Megatron's looped chunks, v = 2 and 3) and zbv (two chunks in a V, split backward; rank 0
// holds the first and the last layers, the tied wte once) each train the run of one process
// (loss per step within 1e-4 relative, fp32): at pp 2 with one layer per virtual stage, at
// (dp 2, tp 2, pp 2) with sequence parallelism, with recomputation, under ZeRO stages 2 and 3,
// and at pp 4 on a model of 8 layers; in bf16 and fp16 those runs; they resume bit-exactly; a
// checkpoint written under interleaved continues the same run under zbv and under 1f1b (and zbv's
// under interleaved); DiLoCo workers of chunked stages train their run under 1f1b.
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

class VirtualStages : public testing::LayoutSuite<VirtualStages> {
 public:
  static constexpr const char* kTag = "virtual_stages";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }
};

// A layout of two chunks per rank (three for interleaved_v3).
Layout chunked(const std::string& schedule, int dp, int tp, int pp, bool sequence_parallel = false,
               const std::string& recompute = "none", int virtual_stages = 2) {
  Layout layout{dp, tp, pp, schedule, sequence_parallel, recompute};
  layout.virtual_stages = virtual_stages;
  return layout;
}

const std::vector<std::string> kChunked = {"interleaved", "zbv"};

TEST_F(VirtualStages, ChunkedSchedulesTrainTheRunOfOneProcess) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  struct Case {
    int dp, tp, pp;
    bool sequence_parallel;
    std::string recompute, extra, tag;
  };
  const std::vector<Case> cases = {
      {1, 1, 2, false, "none", "", ""},
      {2, 2, 2, true, "none", "", ""},
      {1, 2, 2, false, "full", "", ""},
      {2, 1, 2, false, "selective", "", ""},
      {2, 1, 2, false, "none", " --set parallel.zero.stage=2", "_zero2"},
      {2, 1, 2, false, "none", " --set parallel.zero.stage=3", "_zero3"},
  };
  for (const std::string& schedule : kChunked) {
    for (const Case& c : cases) {
      const Layout layout = chunked(schedule, c.dp, c.tp, c.pp, c.sequence_parallel, c.recompute);
      const std::string name = layout.name() + c.tag;
      SCOPED_TRACE(name);
      const std::string run = train(*dir_, layout, name, c.extra);
      expect_close(metric(run, "loss"), reference, 0, "loss");
      expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss");
    }
  }
  // Interleaved with 3 chunks: 6 virtual stages of a 6-layer model on 2 ranks.
  const std::string six = " --set model.n_layer=6";
  const std::string reference_six = train(*dir_, Layout{}, "reference_six_layers", six);
  const Layout interleaved = chunked("interleaved", 1, 1, 2, false, "none", 3);
  const std::string run = train(*dir_, interleaved, interleaved.name(), six);
  expect_close(metric(run, "loss"), metric(reference_six, "loss"), 0, "loss, v 3");
}

TEST_F(VirtualStages, FourStagesOfTwoChunksTrainTheRunOfOneProcess) {
  const std::string eight = " --set model.n_layer=8";
  const auto reference = metric(train(*dir_, Layout{}, "reference_eight_layers", eight), "loss");
  for (const std::string& schedule : kChunked) {
    const Layout layout = chunked(schedule, 1, 1, 4);
    SCOPED_TRACE(layout.name());
    const std::string run = train(*dir_, layout, layout.name() + "_eight", eight);
    expect_close(metric(run, "loss"), reference, 0, "loss");
  }
}

TEST_F(VirtualStages, ChunkedSchedulesTrainTheMixedPrecisionRunsOfOneProcess) {
  for (const std::string compute : {"bf16", "fp16"}) {
    Layout single;
    single.compute = compute;
    const std::string reference = train(*dir_, single, single.name());
    for (const std::string& schedule : kChunked) {
      Layout layout = chunked(schedule, 1, 2, 2, true);
      layout.compute = compute;
      SCOPED_TRACE(layout.name());
      const std::string run = train(*dir_, layout, layout.name());
      // As for any layout in bf16 (parallel_layouts_test): fp32 reduction-order differences flip
      // some roundings to bf16's 8 significant bits (fp16's 11 and its dynamic loss scale
      // stay within the same bound).
      expect_close(metric(run, "loss"), metric(reference, "loss"), 0, compute + " loss", 1e-3);
    }
  }
}

TEST_F(VirtualStages, ChunkedSchedulesResumeBitExactly) {
  namespace fs = std::filesystem;
  for (const std::string& schedule : kChunked) {
    SCOPED_TRACE(schedule);
    const Layout layout = chunked(schedule, 2, 1, 2);
    const std::string straight = train(*dir_, layout, schedule + "_straight");
    const std::string first =
        train(*dir_, layout, schedule + "_split", " --set train.stop_after=10");
    ASSERT_TRUE(fs::exists(first + "/checkpoints/step_00000010.h5"));
    const std::string second = train(*dir_, layout, schedule + "_split", " --resume");
    EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
    EXPECT_EQ(metric(second, "val_loss"), metric(straight, "val_loss"));
  }
}

TEST_F(VirtualStages, CheckpointsMoveBetweenChunkings) {
  namespace fs = std::filesystem;
  const auto reference = metric(reference_dir_, "loss");
  const std::string interleaved = train(*dir_, chunked("interleaved", 1, 1, 2),
                                        "interleaved_written", " --set train.stop_after=10");
  const std::string zbv =
      train(*dir_, chunked("zbv", 2, 1, 2), "zbv_written", " --set train.stop_after=10");
  struct Resume {
    std::string checkpoint;
    Layout layout;
  };
  const std::string from_interleaved = interleaved + "/checkpoints/step_00000010.h5";
  const std::vector<Resume> resumes = {
      {from_interleaved, chunked("zbv", 1, 2, 2)},
      {from_interleaved, Layout{1, 1, 4}},
      {from_interleaved, Layout{2, 1, 1}},
      {zbv + "/checkpoints/step_00000010.h5", chunked("interleaved", 2, 2, 2, true)},
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

TEST_F(VirtualStages, DilocoWorkersRunChunkedStages) {
  // Two DiLoCo workers of two pipeline stages each: the workers' runs under interleaved and zbv
  // are their run under 1f1b.
  const auto run = [&](const std::string& schedule, int virtual_stages) {
    return testing::train_diloco_workers(
        *dir_, chunked(schedule, 1, 1, 2, false, "none", virtual_stages), "diloco_" + schedule);
  };
  const auto one_f_one_b = metric(run("1f1b", 1), "loss");
  ASSERT_EQ(one_f_one_b.size(), 20u);
  for (const std::string& schedule : kChunked) {
    SCOPED_TRACE(schedule);
    expect_close(metric(run(schedule, 2), "loss"), one_f_one_b, 0, "loss");
  }
}

}  // namespace
}  // namespace strata
