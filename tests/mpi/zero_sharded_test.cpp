// ZeRO stages 2 (gradients sharded, reduce-scattered segment by segment as the backward passes
// produce them) and 3 (weights sharded too, gathered per segment when used;
// parallel/zero/sharded_parameters.h) train the run of stage 0: at dp 2 and 4, at (dp 2, tp 2, pp
// 2) with both schedules, with sequence parallelism and full recomputation, with both gradient
// reduction policies, with fp16 dynamic loss scaling (the same steps skipped) and bf16; they
// resume bit-exactly; a stage-3 checkpoint resumes under stage 0 on one rank and under stage 2 on
// (dp 2, tp 2); rank 0's bytes per step are the analytic count; the memory account is the formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "model/parameter_layout.h"
#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::logged;
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

TEST_F(ZeroSharded, CommunicationAndMemoryMatchTheAnalyticCount) {
  // (dp 2, tp 2, pp 2), 1F1B: rank 0 holds the embedding and layers 0-1 of tp shard 0 (segments
  // wte, wpe, h.0, h.1) and owns the first of 2 shards of the buffer both pipeline ends pad to
  // the larger total; per step m = 4 micro-batches of 2·16 rows of 32 floats.
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
  const ParameterLayout layout = ParameterLayout::for_partition(shape, first);
  const std::size_t buffer = ParameterLayout::padded_size(
      std::max(layout.total(), ParameterLayout::for_partition(shape, last).total()), 2);
  const std::size_t shard = buffer / 2;
  const double micro_batches = 4, scalar = 8, activation = 2 * 16 * 32 * 4.0;
  // A segment's elements in shard r.
  auto piece = [&](const ParameterSegment& s, std::size_t r) {
    return static_cast<double>(intersect(s.range, {r * shard, (r + 1) * shard}).size());
  };
  double reduce_scatter = 0, gather_forward = 0, gather_backward = 0, wte = 0, block_or_wpe = 0;
  std::vector<double> sizes;
  for (const ParameterSegment& s : layout.segments()) {
    const double size = static_cast<double>(s.range.size());
    // Ring, uneven chunks: rank 0 sends all but its own chunk (reduce-scatter), all but its
    // successor's (all-gather).
    reduce_scatter += 4 * (size - piece(s, 0));
    gather_forward += 4 * (size - piece(s, 1));
    if (s.name.starts_with("h.")) gather_backward += 4 * (size - piece(s, 1));
    sizes.push_back(size);
    if (s.name == "wte")
      wte = size;
    else
      block_or_wpe = std::max(block_or_wpe, size);
  }
  ASSERT_LE(layout.at("wte").size, shard);  // rank 0 owns (and exchanges) all of its wte
  std::sort(sizes.rbegin(), sizes.rend());
  const double two_largest = sizes[0] + sizes[1];  // the two blocks
  const double tp = micro_batches * (1 + 2 * 2 + 2 * 2) * activation + scalar;
  const double send = micro_batches * activation + 4 * wte;
  struct Case {
    int stage;
    std::string settings;
    double all_gather, gradient_buckets, gathered_weights, master_weights;
  };
  const Case cases[] = {
      // Stage 2, reduced once per step: the buckets of all segments live until the last pass.
      {2, stage(2), 4.0 * buffer / 2, 4.0 * static_cast<double>(layout.total()), 0, 4.0 * buffer},
      // Stage 3, reduced every micro-batch: the wte bucket spans the pass (the embedding adds to
      // it last), the others one at a time; weights: the segment in use and the next one,
      // prefetched (here the two blocks: h.1 arrives while h.0 computes).
      {3, stage(3) + kPerMicroBatch, micro_batches * (gather_forward + gather_backward),
       4 * (wte + block_or_wpe), 4 * two_largest, 4.0 * shard},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.settings);
    const std::string run =
        train(*dir_, Layout{2, 2, 2}, "sharded_comm_" + std::to_string(c.stage), c.settings);
    const double rs = (c.stage == 3 ? micro_batches : 1) * reduce_scatter;
    for (int step : {2, 20}) {
      SCOPED_TRACE("step " + std::to_string(step));
      auto at = [&](const std::string& key) { return logged(run, step, key); };
      EXPECT_EQ(at("\"reduce_scatter\": {\"intra_node\": "), rs);
      EXPECT_EQ(at("\"all_gather\": {\"intra_node\": "), c.all_gather);
      EXPECT_EQ(at("\"send\": {\"intra_node\": "), send);
      EXPECT_EQ(at("\"all_reduce\": {\"intra_node\": "), tp + 2 * scalar + 2 * scalar);
      EXPECT_EQ(at("\"dp\": "), rs + c.all_gather + 2 * scalar);
      // Memory: what is held sharded, and the transient peaks.
      EXPECT_EQ(at("\"master_weights\": "), c.master_weights);
      EXPECT_EQ(at("\"compute_weights\": "), 0.0);  // fp32
      EXPECT_EQ(at("\"gradients\": "), 4.0 * shard);
      EXPECT_EQ(at("\"optimizer_state\": "), 2 * 4.0 * shard);
      EXPECT_EQ(at("\"gathered_weights\": "), c.gathered_weights);
      EXPECT_EQ(at("\"gradient_buckets\": "), c.gradient_buckets);
    }
  }
}

}  // namespace
}  // namespace strata
