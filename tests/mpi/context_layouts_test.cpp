// Context parallelism (parallel.cp, docs/ARCHITECTURE.md §2 "cp") on the layouts the CPU backend
// runs: a 4-layer model with sequences of 16 tokens trains one process's run (loss and val_loss
// per step within 1e-4 relative, fp32) with every sequence split over cp 2 and 4 ranks, its K/V
// travelling by ring or all_gather: alone and with dp, tp (with and without sequence
// parallelism), pp under every schedule, ZeRO stages 1-3, recomputation, and as DiLoCo workers;
// with the Llama block's rotary positions too. It resumes bit-exactly, its checkpoints continue
// the same run at cp 1 and a cp 1 checkpoint at cp 2, the attention's bytes per step are those of
// ARCHITECTURE §2's table, and what it does not run with is refused in one line.
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

class ContextLayouts : public testing::LayoutSuite<ContextLayouts> {
 public:
  static constexpr const char* kTag = "context_layouts";
  static constexpr int kHeads = 4;
  static Layout reference() { return {}; }

 protected:
  // Each layout (with its `extra` overrides) trains the reference run.
  static void expect_the_reference(const std::vector<std::pair<Layout, std::string>>& cases,
                                   const std::string& reference = reference_dir_) {
    const auto loss = metric(reference, "loss"), val_loss = metric(reference, "val_loss");
    ASSERT_EQ(loss.size(), 20u);
    for (const auto& [layout, extra] : cases) {
      const std::string name = layout.name() + std::to_string(std::hash<std::string>{}(extra));
      SCOPED_TRACE(name + extra);
      const std::string trained = run(layout, name, extra);
      expect_close(metric(trained, "loss"), loss, 0, "loss");
      expect_close(metric(trained, "val_loss"), val_loss, 0, "val_loss");
      expect_context_traffic(trained, layout);
    }
  }
  // A run at cp > 1 did split its sequences: its attention moved bytes over the cp group (a run
  // that ignored parallel.cp, taking the ranks as data-parallel, would train the same run).
  static void expect_context_traffic(const std::string& trained, const Layout& layout) {
    if (layout.cp > 1) {
      EXPECT_GT(testing::logged(trained, 1, "\"cp\": "), 0.0);
    }
  }
};

// `layout` with cp ranks whose K/V travel by `comm`.
Layout with_cp(Layout layout, int cp, const std::string& comm = "ring") {
  layout.cp = cp;
  layout.cp_comm = comm;
  return layout;
}

Layout with_stages(Layout layout, int virtual_stages) {
  layout.virtual_stages = virtual_stages;
  return layout;
}

TEST_F(ContextLayouts, ContextRanksTrainTheRunOfOneProcess) {
  expect_the_reference({{with_cp({}, 2), ""},
                        {with_cp({}, 2, "all_gather"), ""},
                        {with_cp({}, 4), ""},
                        {with_cp({2, 1, 1}, 2), ""},
                        {with_cp({1, 2, 1}, 2), ""},
                        {with_cp({1, 2, 1, "1f1b", true}, 2, "all_gather"), ""},
                        {with_cp({1, 2, 1, "1f1b", true, "selective"}, 2), ""},
                        {with_cp({1, 1, 1, "1f1b", false, "full"}, 2), ""}});
}

TEST_F(ContextLayouts, EveryPipelineScheduleAndZeroStage) {
  expect_the_reference({{with_cp({1, 1, 2}, 2), ""},
                        {with_cp({1, 1, 2, "gpipe"}, 2), ""},
                        {with_cp({1, 1, 2, "zb-h1"}, 2), ""},
                        {with_cp({1, 1, 2, "zb-h2"}, 2, "all_gather"), ""},
                        {with_cp(with_stages({1, 1, 2, "zbv"}, 2), 2), ""},
                        {with_cp(with_stages({1, 1, 2, "interleaved"}, 2), 2), ""},
                        {with_cp({}, 2), " --set parallel.zero.stage=1"},
                        {with_cp({2, 1, 1}, 2), " --set parallel.zero.stage=2"},
                        {with_cp({1, 1, 2}, 2), " --set parallel.zero.stage=3"}});
}

TEST_F(ContextLayouts, RotaryPositionsOfTheLlamaBlock) {
  const std::string llama =
      " --set model.norm=rmsnorm --set model.mlp=swiglu --set model.d_ff=48"
      " --set model.position=rope --set model.rope_theta=1000 --set model.kv_heads=2"
      " --set model.bias=false --set model.tie_embeddings=false";
  const std::string reference = run(Layout{}, "llama_reference", llama);
  expect_the_reference({{with_cp({}, 4, "all_gather"), llama},
                        {with_cp({1, 2, 1, "1f1b", true}, 2), llama},
                        {with_cp({1, 1, 2, "zb-h1"}, 2), llama}},
                       reference);
}

TEST_F(ContextLayouts, DilocoWorkersOfContextRanksTrainTheRunOfSingleRankWorkers) {
  const auto reference =
      metric(testing::train_diloco_workers(*dir_, Layout{}, "diloco_single"), "loss");
  ASSERT_EQ(reference.size(), 20u);
  const std::string trained = testing::train_diloco_workers(*dir_, with_cp({}, 2), "diloco_cp2", 2);
  expect_close(metric(trained, "loss"), reference, 0, "loss");
  expect_context_traffic(trained, with_cp({}, 2));
}

TEST_F(ContextLayouts, ResumesBitExactlyAndCheckpointsMoveToAndFromCpOne) {
  namespace fs = std::filesystem;
  const Layout layout = with_cp({2, 1, 1}, 2);
  const std::string zero = " --set parallel.zero.stage=3";
  const std::string straight = run(layout, "straight", zero);
  const std::string first = run(layout, "split", zero + " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  EXPECT_EQ(metric(run(layout, "split", zero + " --resume"), "loss"), metric(straight, "loss"));
  // cp 2's checkpoint on one process, and one process's at cp 2: the run of one process.
  const std::string single = run(Layout{}, "single_split", " --set train.stop_after=10");
  struct Moved {
    Layout layout;
    std::string from;
  };
  for (const Moved& moved : {Moved{Layout{}, checkpoint},
                             Moved{with_cp({}, 2), single + "/checkpoints/step_00000010.h5"}}) {
    const std::string name = "moved_" + moved.layout.name();
    fs::create_directories(dir_->str() + "/runs/" + name);
    const std::string trained = run(moved.layout, name, " --resume " + moved.from);
    expect_close(metric(trained, "loss"), metric(reference_dir_, "loss"), 10, "loss after resume");
  }
}

// Step 1's bytes over the cp group are the attention's alone: per micro-batch and layer, the
// forward's and the backward's of ARCHITECTURE §2's table, X = B·(T/cp)·2·KV·hs·4 bytes.
TEST_F(ContextLayouts, AttentionBytesAreTheTablesCount) {
  const int micro_batches = 8, layers = 4, B = 2, T = 16, C = 32;
  for (const auto& [cp, comm] :
       {std::pair{2, std::string("ring")}, std::pair{4, std::string("all_gather")}}) {
    const Layout layout = with_cp({}, cp, comm);
    SCOPED_TRACE(layout.name());
    const double X = B * (T / cp) * 2.0 * C * 4;  // KV·hs = C: multi-head attention
    const double steps = cp - 1;
    const double per_call = comm == "ring" ? steps + (2 * steps + 1) : steps + 2 * steps;
    const std::string trained = run(layout, "bytes_" + layout.name());
    EXPECT_EQ(testing::logged(trained, 1, "\"cp\": "), micro_batches * layers * per_call * X);
  }
}

TEST_F(ContextLayouts, WhatItDoesNotRunWithIsRefusedInOneLine) {
  const std::string train = testing::bin("train") + " " + dir_->str() + "/config.yaml";
  testing::expect_one_error_line(train + " --set parallel.cp=3", "model.seq_len (16)");
  testing::expect_one_error_line(
      train + " --set parallel.cp=2 --set train.eval_multiple_choice=questions.jsonl",
      "train.eval_multiple_choice");
  testing::expect_one_error_line(train + " --set parallel.cp=2 --set model.moe.experts=4",
                                 "capacity groups");
}

}  // namespace
}  // namespace strata
