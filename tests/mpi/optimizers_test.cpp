// The optimizers other than AdamW (optimizer.name, train/optimizer/) on every kind of layout:
// Adafactor, AdamW8bit and Muon under ZeRO 1-3, tensor parallelism (Adafactor's statistics summed
// over the shards and slices, the 8-bit blocks' scales agreed over them, Muon's matrices gathered
// whole), pipelines (the tied wte on both ends), sequence parallelism and zbv train the
// one-process run (loss and val_loss within 1e-4 per step), and so do mixture-of-experts models
// under expert and tensor parallelism (AdamW8bit there within 1e-3: see that test); all three are
// DiLoCo's inner optimizer too; they resume bit-exactly; their checkpoints (Adafactor's statistics
// and the 8-bit scales as whole per-tensor datasets, the 8-bit codes as int8 and uint8 ones)
// resume on other layouts and pass `ckpt verify`; resuming under another optimizer is one error
// line.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <utility>

#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;
using testing::train;

const std::string kAdafactor = " --set optimizer.name=adafactor";
const std::string kMuon = " --set optimizer.name=muon --set optimizer.muon.lr=0.01";
// Blocks of 64 elements: ZeRO shards and tensor-parallel slices cut them.
const std::string kAdamW8bit =
    " --set optimizer.name=adamw8bit --set optimizer.adamw8bit.block_size=64";

std::string zero(int stage) { return " --set parallel.zero.stage=" + std::to_string(stage); }

class Optimizers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("optimizers");
    testing::write_synthetic_dataset(*dir_ / "data", 64, 40000);
    testing::write_layout_config(*dir_, 4);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline TempDir* dir_ = nullptr;
};

// Every kind of layout trains the one-process run of optimizer `extra` (loss and val_loss per
// step within 1e-4), whose last loss differs from AdamW's by more than `from_adamw`.
void expect_every_layout_trains(const TempDir& dir, const std::string& name,
                                const std::string& extra, double from_adamw = 1e-3) {
  const std::string single = train(dir, Layout{}, name + "_single", extra);
  const auto reference = metric(single, "loss");
  const auto reference_val = metric(single, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  const std::string adamw = train(dir, Layout{}, name + "_adamw");
  EXPECT_GT(std::abs(metric(adamw, "loss").back() - reference.back()), from_adamw);
  const std::pair<Layout, std::string> runs[] = {
      {Layout{2, 1, 1}, zero(0)},
      {Layout{4, 1, 1}, zero(1)},
      {Layout{2, 1, 1}, zero(2)},
      {Layout{2, 1, 1}, zero(3)},
      {Layout{1, 2, 1}, zero(0)},
      {Layout{1, 1, 2}, zero(0)},
      {Layout{2, 1, 2}, zero(2)},  // each pipeline end updates its own wte
      {Layout{2, 2, 2}, zero(1)},
      {Layout{2, 2, 1, "1f1b", true}, zero(3)},  // sequence parallelism
      {Layout{2, 2, 2, "zbv", false, "none", "fp32", "", 2}, zero(1)},
  };
  for (const auto& [layout, stage] : runs) {
    SCOPED_TRACE(name + " " + layout.name() + stage);
    const std::string run =
        train(dir, layout, name + "_" + layout.name() + "_z" + stage.back(), extra + stage);
    expect_close(metric(run, "loss"), reference, 0, "loss");
    expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss");
  }
}

TEST_F(Optimizers, AdafactorOnEveryLayoutTrainsTheOneProcessRun) {
  expect_every_layout_trains(*dir_, "adafactor", kAdafactor);
}

TEST_F(Optimizers, AdamW8bitOnEveryLayoutTrainsTheOneProcessRun) {
  // It tracks AdamW closely (1.3e-4 apart after 20 steps), but not exactly.
  expect_every_layout_trains(*dir_, "adamw8bit", kAdamW8bit, 1e-5);
}

TEST_F(Optimizers, MuonOnEveryLayoutTrainsTheOneProcessRun) {
  expect_every_layout_trains(*dir_, "muon", kMuon);
}

TEST_F(Optimizers, MuonResumesBitExactlyAndOnOtherLayouts) {
  const std::string extra = kMuon + zero(1);
  const std::string straight = train(*dir_, Layout{2, 2, 1}, "muon_straight", extra);
  const std::string first =
      train(*dir_, Layout{2, 2, 1}, "muon_split", extra + " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  const std::string second = train(*dir_, Layout{2, 2, 1}, "muon_split", extra + " --resume");
  EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
  fs::create_directories(dir_->str() + "/runs/muon_resumed");
  const std::string other =
      train(*dir_, Layout{2, 1, 2}, "muon_resumed", kMuon + zero(3) + " --resume " + checkpoint);
  expect_close(metric(other, "loss"), metric(straight, "loss"), 10, "loss after resume");
}

TEST_F(Optimizers, AdafactorsOptionsTrainTheOneProcessRunSharded) {
  const std::string options =
      kAdafactor +
      " --set optimizer.adafactor.relative_step=true --set optimizer.adafactor.beta1=0.9";
  const std::string single = train(*dir_, Layout{}, "options_single", options);
  const std::string sharded = train(*dir_, Layout{2, 2, 1}, "options_sharded", options + zero(2));
  expect_close(metric(sharded, "loss"), metric(single, "loss"), 0, "loss");
  const std::string defaults = train(*dir_, Layout{}, "options_defaults", kAdafactor);
  EXPECT_GT(std::abs(metric(single, "loss").back() - metric(defaults, "loss").back()), 1e-4)
      << "the options changed nothing";
}

// A run of `optimizer` on (dp 2, tp 2, pp 2, ZeRO 2) stopped at step 10 resumes bit-exactly, its
// checkpoint passes `ckpt verify` and resumes on other layouts.
void expect_resumes(const TempDir& dir, const std::string& name, const std::string& optimizer) {
  const Layout layout{2, 2, 2};
  const std::string extra = optimizer + zero(2);
  const std::string straight = train(dir, layout, name + "_straight", extra);
  const std::string first =
      train(dir, layout, name + "_split", extra + " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  const auto verify = testing::run_command(testing::bin("ckpt") + " verify " + checkpoint);
  EXPECT_EQ(verify.status, 0) << verify.output;
  const std::string second = train(dir, layout, name + "_split", extra + " --resume");
  EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
  EXPECT_EQ(metric(second, "val_loss"), metric(straight, "val_loss"));
  const std::pair<Layout, std::string> resumes[] = {
      {Layout{1, 1, 1}, zero(0)}, {Layout{4, 1, 1}, zero(3)}, {Layout{1, 2, 2}, zero(0)}};
  for (const auto& [other, stage] : resumes) {
    SCOPED_TRACE("resumed at " + other.name() + stage);
    const std::string run_name = name + "_resumed_" + other.name() + "_z" + stage.back();
    fs::create_directories(dir.str() + "/runs/" + run_name);
    const std::string run =
        train(dir, other, run_name, optimizer + stage + " --resume " + checkpoint);
    expect_close(metric(run, "loss"), metric(straight, "loss"), 10, "loss after resume");
  }
}

TEST_F(Optimizers, AdafactorResumesBitExactlyAndOnOtherLayouts) {
  expect_resumes(*dir_, "adafactor", kAdafactor + " --set optimizer.adafactor.beta1=0.9");
}

// Its codes stored as int8 and uint8 datasets, its scales per tensor.
TEST_F(Optimizers, AdamW8bitResumesBitExactlyAndOnOtherLayouts) {
  expect_resumes(*dir_, "adamw8bit", kAdamW8bit);
}

// Each optimizer with its per-element state offloaded (Adafactor with its first moment).
const std::pair<std::string, std::string> kOffloaded[] = {
    {"adamw", ""},
    {"adafactor", kAdafactor + " --set optimizer.adafactor.beta1=0.9"},
    {"adamw8bit", kAdamW8bit},
    {"muon", kMuon}};

// optimizer.offload host and disk (chunks of 1024 elements: every tensor cut) train bit for bit
// the run that keeps the optimizer's state in place: every optimizer on ZeRO shards, AdamW and
// Muon (whose split matrices are gathered between chunks) on tp × pp too
// (tests/unit/optimizer_offload_test.cpp covers every optimizer element by element); an AdamW disk
// run stopped at step 10 resumes bit-exactly from its checkpoint (the state file itself is scratch;
// the next test resumes every optimizer).
TEST_F(Optimizers, OffloadedStateTrainsBitForBitAsInPlace) {
  const std::string chunk = " --set optimizer.offload_chunk=1024";
  const std::string disk =
      " --set optimizer.offload=disk --set optimizer.offload_dir=" + dir_->str() + "/offload";
  const std::pair<Layout, std::string> runs[] = {{Layout{2, 1, 1}, zero(1)},
                                                 {Layout{1, 2, 2}, zero(0)}};
  for (const auto& [optimizer, flags] : kOffloaded) {
    for (const auto& [layout, stage] : runs) {
      if (layout.tp > 1 && optimizer != "adamw" && optimizer != "muon") continue;
      SCOPED_TRACE(optimizer + " " + layout.name() + stage);
      const std::string name = "offload_" + optimizer + "_" + layout.name();
      const std::string in_place = train(*dir_, layout, name + "_none", flags + stage);
      const std::string host = train(*dir_, layout, name + "_host",
                                     flags + stage + chunk + " --set optimizer.offload=host");
      const std::string on_disk =
          train(*dir_, layout, name + "_disk", flags + stage + chunk + disk);
      for (const std::string& run : {host, on_disk}) {
        EXPECT_EQ(metric(run, "loss"), metric(in_place, "loss"));  // exact
        EXPECT_EQ(metric(run, "val_loss"), metric(in_place, "val_loss"));
      }
    }
  }
  const std::string extra = zero(1) + chunk + disk;
  const std::string straight = train(*dir_, Layout{2, 1, 1}, "offload_straight", extra);
  train(*dir_, Layout{2, 1, 1}, "offload_split", extra + " --set train.stop_after=10");
  const std::string second = train(*dir_, Layout{2, 1, 1}, "offload_split", extra + " --resume");
  EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
}

// Every rank SIGKILLs itself in the middle of update 8 (after its second chunk of 1024: weights
// and the state file half updated); the run resumes from its step-5 checkpoint and ends bit for
// bit as the run that was never killed. For every optimizer (AdamW8bit dies in its second pass,
// Muon in its AdamW part, before the matrices).
TEST_F(Optimizers, ADiskOffloadKilledMidUpdateResumesBitExactly) {
  for (const auto& [optimizer, flags] : kOffloaded) {
    SCOPED_TRACE(optimizer);
    const std::string extra =
        flags + zero(1) +
        " --set optimizer.offload=disk --set optimizer.offload_dir=" + dir_->str() +
        "/offload_kill --set optimizer.offload_chunk=1024" + " --set checkpoint.every=5";
    const std::string name = "kill_" + optimizer;
    const std::string straight = train(*dir_, Layout{2, 1, 1}, name + "_straight", extra);
    const std::string command = "STRATA_TEST_HOOKS=kill_in_update=8 " + testing::mpirun(2) +
                                testing::bin("train") + " " + dir_->str() + "/config.yaml" +
                                Layout{2, 1, 1}.overrides() + " --set run.name=" + name + "_split" +
                                extra;
    const auto killed = testing::run_command(command);
    ASSERT_NE(killed.status, 0) << killed.output;
    const std::string run = dir_->str() + "/runs/" + name + "_split";
    ASSERT_TRUE(fs::exists(run + "/checkpoints/step_00000005.h5"));
    ASSERT_FALSE(fs::exists(run + "/checkpoints/step_00000010.h5"));
    const std::string resumed = train(*dir_, Layout{2, 1, 1}, name + "_split", extra + " --resume");
    EXPECT_EQ(metric(resumed, "loss"), metric(straight, "loss"));  // exact
    EXPECT_EQ(metric(resumed, "val_loss"), metric(straight, "val_loss"));
  }
}

TEST_F(Optimizers, ResumingUnderAnotherOptimizerIsOneErrorLine) {
  const std::string first =
      train(*dir_, Layout{}, "switch", kAdafactor + " --set train.stop_after=10");
  const std::string command = testing::mpirun(1) + testing::bin("train") + " " + dir_->str() +
                              "/config.yaml --set run.name=switch --resume";
  const auto result = testing::run_command(command);
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output.find("error: --resume: checkpoint '" + first +
                               "/checkpoints/step_00000010.h5' holds the state of optimizer.name "
                               "adafactor but this run's optimizer.name is adamw"),
            std::string::npos)
      << result.output;
  // Its weights start a new AdamW run.
  const std::string init =
      train(*dir_, Layout{}, "switch_init", " --init " + first + "/checkpoints/step_00000010.h5");
  EXPECT_EQ(metric(init, "loss").size(), 20u);
}

// Mixture-of-experts blocks (4 experts, top-2, every second block): each optimizer's one-process
// run on expert parallelism (ep 2 of dp 4) under ZeRO-2 (the experts' state sharded over
// expert_dp) and on tp 2
// with sequence parallelism (the experts split like the MLP).
TEST_F(Optimizers, EveryOptimizerTrainsExpertsOnEveryKindOfLayout) {
  const std::string experts =
      " --set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.every=2";
  Layout expert_parallel{4, 1, 1};
  expert_parallel.ep = 2;
  // AdamW8bit within 1e-3: the experts' gradients are summed in another order under ep and tp,
  // and a difference of an ulp that moves a moment across the midpoint of two codes moves it by
  // a whole code (up to 1.4% of its block's scale); from step 12 on the losses here differ by up
  // to 2e-4 of the one process's (1e-8 before). The continuous optimizers stay within 1e-4.
  const std::tuple<std::string, std::string, double> optimizers[] = {
      {"adafactor", kAdafactor, 1e-4}, {"muon", kMuon, 1e-4}, {"adamw8bit", kAdamW8bit, 1e-3}};
  for (const auto& [optimizer_name, optimizer, tolerance] : optimizers) {
    const std::string name = "moe_" + optimizer_name;
    SCOPED_TRACE(name);
    const std::string single = train(*dir_, Layout{}, name + "_single", experts + optimizer);
    const auto reference = metric(single, "loss");
    ASSERT_EQ(reference.size(), 20u);
    const std::pair<Layout, std::string> runs[] = {
        {expert_parallel, zero(2)},
        {Layout{1, 2, 1, "1f1b", true}, zero(0)},
    };
    for (const auto& [layout, stage] : runs) {
      const std::string run = train(*dir_, layout, name + "_" + layout.name() + "_z" + stage.back(),
                                    experts + optimizer + stage);
      expect_close(metric(run, "loss"), reference, 0, "loss", tolerance);
      expect_close(metric(run, "val_loss"), metric(single, "val_loss"), 0, "val_loss", tolerance);
    }
  }
}

// Two workers of one rank each against two workers of (dp 2, ZeRO 2) each; and a resume.
void expect_diloco_inner(const TempDir& dir, const std::string& name,
                         const std::string& optimizer) {
  const std::string extra = optimizer + " --set diloco.enabled=true --set diloco.workers=2" +
                            " --set diloco.inner_steps=5 --set train.global_batch=8";
  const std::string single = testing::train_ranks(dir, 2, Layout{}, name + "_single", extra);
  const std::string sharded =
      testing::train_ranks(dir, 4, Layout{2, 1, 1}, name + "_sharded", extra + zero(2));
  expect_close(metric(sharded, "loss"), metric(single, "loss"), 0, "loss");
  expect_close(metric(sharded, "outer_grad_norm"), metric(single, "outer_grad_norm"), 0,
               "outer grad norm");
  testing::train_ranks(dir, 4, Layout{2, 1, 1}, name + "_split",
                       extra + zero(2) + " --set train.stop_after=10");
  const std::string resumed =
      testing::train_ranks(dir, 4, Layout{2, 1, 1}, name + "_split", extra + zero(2) + " --resume");
  EXPECT_EQ(metric(resumed, "loss"), metric(sharded, "loss"));  // exact
}

TEST_F(Optimizers, AdafactorIsDilocosInnerOptimizer) {
  expect_diloco_inner(*dir_, "diloco_adafactor", kAdafactor);
}

// Each worker's ZeRO-2 shards gather the matrices Muon orthogonalises within the worker.
TEST_F(Optimizers, MuonIsDilocosInnerOptimizer) {
  expect_diloco_inner(*dir_, "diloco_muon", kMuon);
}

// Each worker's codes are datasets of their own (int8 and uint8 under the worker's prefix).
TEST_F(Optimizers, AdamW8bitIsDilocosInnerOptimizer) {
  expect_diloco_inner(*dir_, "diloco_adamw8bit", kAdamW8bit);
}

}  // namespace
}  // namespace strata
