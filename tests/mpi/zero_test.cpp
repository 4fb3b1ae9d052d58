// ZeRO stage 1 (optimizer state sharded over the data-parallel group;
// parallel/mesh/reduction_plan.h) trains the run of stage 0: at dp 2 and 4, at (dp 2, tp 2, pp 2)
// with both schedules, with sequence parallelism and full recomputation, with fp16 dynamic loss
// scaling (the same steps skipped) and bf16 (loss per step within 1e-4 relative in fp32); it
// resumes bit-exactly; its checkpoints resume under stage 0 and other layouts; and rank 0's
// communication per step is the analytic count: the all-reduce of the gradients becomes a
// reduce-scatter and an all-gather.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/parameter_layout.h"
#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;
using testing::train;

const std::string kStage1 = " --set parallel.zero.stage=1";

class Zero : public testing::LayoutSuite<Zero> {
 public:
  static constexpr const char* kTag = "zero";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }
};

TEST_F(Zero, Stage1TrainsTheRunOfStage0) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  for (const Layout& layout :
       {Layout{2, 1, 1}, Layout{4, 1, 1}, Layout{2, 2, 2}, Layout{2, 2, 2, "gpipe"},
        Layout{2, 2, 1, "1f1b", true}, Layout{4, 1, 2, "1f1b", false, "full"},
        Layout{2, 2, 2, "1f1b", true, "full"}}) {
    SCOPED_TRACE(layout.name());
    const std::string run = train(*dir_, layout, "zero1_" + layout.name(), kStage1);
    expect_close(metric(run, "loss"), reference, 0, "loss");
    expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss");
  }
}

TEST_F(Zero, Stage1WithFp16AndBf16FollowsStage0) {
  for (const std::string compute : {"fp16", "bf16"}) {
    SCOPED_TRACE(compute);
    Layout single;
    single.compute = compute;
    // fp16 from a scale high enough that the first steps overflow and are skipped.
    const std::string scale =
        compute == "fp16" ? " --set precision.initial_loss_scale=4294967296" : "";
    const std::string reference = train(*dir_, single, "zero0_" + single.name(), scale);
    Layout layout{2, 2, 2};
    layout.compute = compute;
    const std::string run = train(*dir_, layout, "zero1_" + layout.name(), kStage1 + scale);
    if (compute == "fp16") {
      // The same steps skipped: the scale each step used, halved after each overflow, is the same
      // sequence; and the reference did skip some.
      EXPECT_EQ(metric(run, "loss_scale"), metric(reference, "loss_scale"));
      const auto scales = metric(reference, "loss_scale");
      ASSERT_EQ(scales.size(), 20u);
      EXPECT_LT(scales.back(), scales.front()) << "no step overflowed: the test checks nothing";
    }
    // As for any layout in 16-bit (parallel_layouts_test): reduction-order differences in fp32
    // flip some roundings to the 16-bit type.
    expect_close(metric(run, "loss"), metric(reference, "loss"), 0, "loss", 1e-3);
  }
}

TEST_F(Zero, Stage1ResumesBitExactly) {
  namespace fs = std::filesystem;
  const Layout layout{2, 1, 2};
  const std::string straight = train(*dir_, layout, "zero1_straight", kStage1);
  const std::string first =
      train(*dir_, layout, "zero1_split", kStage1 + " --set train.stop_after=10");
  ASSERT_TRUE(fs::exists(first + "/checkpoints/step_00000010.h5"));
  const std::string second = train(*dir_, layout, "zero1_split", kStage1 + " --resume");
  EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
  EXPECT_EQ(metric(second, "val_loss"), metric(straight, "val_loss"));
}

TEST_F(Zero, Stage1CheckpointsResumeUnderOtherStagesAndLayouts) {
  namespace fs = std::filesystem;
  const auto reference = metric(reference_dir_, "loss");
  const std::string first =
      train(*dir_, Layout{4, 1, 1}, "zero1_written", kStage1 + " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  const std::pair<Layout, std::string> resumes[] = {
      {Layout{1, 1, 1}, ""}, {Layout{2, 2, 1}, kStage1}, {Layout{2, 1, 2}, kStage1}};
  for (const auto& [layout, stage] : resumes) {
    SCOPED_TRACE("resumed at " + layout.name() + stage);
    const std::string name = "zero1_resumed_" + layout.name() + (stage.empty() ? "_0" : "_1");
    fs::create_directories(dir_->str() + "/runs/" + name);
    const std::string run = train(*dir_, layout, name, stage + " --resume " + checkpoint);
    expect_close(metric(run, "loss"), reference, 10, "loss after resume");
  }
}

TEST_F(Zero, Stage1CommunicationMatchesTheAnalyticCount) {
  // (dp 2, tp 2, pp 2): rank 0 holds the embedding and layers 0-1 of tp shard 0; per step m = 4
  // micro-batches of 2·16 rows of 32 floats; every group has two ranks.
  const std::string run = train(*dir_, Layout{2, 2, 2}, "zero1_comm", kStage1);
  const GptShape shape{4, 4, 32, 16, 64};
  ModelPartition first;
  first.tp_size = 2;
  first.layer_end = 2;
  first.has_head = false;
  ModelPartition last = first;
  last.layer_begin = 2;
  last.layer_end = 4;
  last.has_embedding = false;
  last.has_head = true;
  // Both pipeline ends pad to the larger total, in 2 shards.
  const double buffer = static_cast<double>(
      ParameterLayout::padded_size(std::max(ParameterLayout::for_partition(shape, first).total(),
                                            ParameterLayout::for_partition(shape, last).total()),
                                   2));
  const double activation = 2 * 16 * 32 * 4.0, micro_batches = 4, scalar = 8;
  const double wte = shape.padded_vocab() / 2 * 32 * 4.0;  // rank 0's shard holds all of it
  ASSERT_LT(wte / 4, buffer / 2);
  // Tensor parallel as at stage 0: embedding + 2 per layer forward, 2 per layer backward, norm.
  const double tp = micro_batches * (1 + 2 * 2 + 2 * 2) * activation + scalar;
  const double send = micro_batches * activation + wte;  // activations, the tied wte exchange
  const double pp = send + 2 * scalar;                   // and the norm's and loss's sums
  // Data parallel: half the buffer reduce-scattered, half gathered, the norm and the loss.
  const double reduce_scatter = buffer * 4 / 2, all_gather = buffer * 4 / 2;
  const double dp = reduce_scatter + all_gather + 2 * scalar;
  for (int step : {2, 20}) {
    SCOPED_TRACE("step " + std::to_string(step));
    auto after = [&](const std::string& key) { return testing::logged(run, step, key); };
    EXPECT_EQ(after("\"reduce_scatter\": {\"intra_node\": "), reduce_scatter);
    EXPECT_EQ(after("\"all_gather\": {\"intra_node\": "), all_gather);
    EXPECT_EQ(after("\"send\": {\"intra_node\": "), send);
    EXPECT_EQ(after("\"all_reduce\": {\"intra_node\": "), tp + 2 * scalar + 2 * scalar);
    EXPECT_EQ(after("\"comm_bytes_by_axis\": {\"tp\": "), tp);
    EXPECT_EQ(after("\"pp\": "), pp);
    EXPECT_EQ(after("\"dp\": "), dp);
    // Memory: whole fp32 weights and gradients over the padded buffer, AdamW's two moments over
    // the owned half, the reduce-scatter's chunk as scratch.
    EXPECT_EQ(after("\"master_weights\": "), buffer * 4);
    EXPECT_EQ(after("\"compute_weights\": "), 0.0);  // fp32: the masters are the weights
    EXPECT_EQ(after("\"gradients\": "), buffer * 4);
    EXPECT_EQ(after("\"optimizer_state\": "), 2 * 4 * buffer / 2);
    EXPECT_EQ(after("\"communication\": "), buffer * 4 / 2);
  }
}

TEST_F(Zero, MemoryAccountFollowsTheStage) {
  // One process at stage 0 holds the whole optimizer state; dp 4 at stage 1 a quarter of it.
  const GptShape shape{4, 4, 32, 16, 64};
  const std::size_t total = ParameterLayout::for_gpt(shape).total();
  const std::pair<std::string, double> runs[] = {
      {reference_dir_, 2.0 * 4 * static_cast<double>(ParameterLayout::padded_size(total, 1))},
      {train(*dir_, Layout{4, 1, 1}, "zero1_memory", kStage1),
       2.0 * 4 * static_cast<double>(ParameterLayout::padded_size(total, 4)) / 4}};
  for (const auto& [run, optimizer_bytes] : runs) {
    const auto optimizer = metric(run, "optimizer_state");
    ASSERT_EQ(optimizer.size(), 20u) << run;
    EXPECT_EQ(optimizer.front(), optimizer_bytes) << run;
  }
}

}  // namespace
}  // namespace strata
