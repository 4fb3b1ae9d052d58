// `train --init CKPT` (train/main.cpp, RunCheckpoints::load): a new run from a checkpoint's
// weights alone. It trains exactly as a resume of a checkpoint holding those weights, zero AdamW
// moments, step 0 and data position 0 would; every layout (tp, pp, ZeRO 3, ep, DiLoCo workers and
// their anchor) starts from the checkpoint's fp32 weights bitwise; a DiLoCo checkpoint gives its
// first worker's weights; its runs resume as any run; and a checkpoint of another model, a
// missing or damaged file, or --init with --resume is one error line before any training.
//
// The layouts' starting weights are read from their step-1 checkpoints: the test-only
// STRATA_TEST_HOOKS=nonfinite_steps=1 makes step 1 non-finite, so train.nonfinite: skip leaves the
// weights and moments as the run started with them.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_verify.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;
using Tensors = std::map<std::string, std::vector<float>>;

const GptShape kShape{2, 2, 32, 16, 64};

// The tensors of `path` under `group` ("/model/", "/outer/anchor/"), by their names in it.
Tensors tensors_in(const std::string& path, const std::string& group) {
  Tensors tensors;
  for_each_checkpoint_tensor(path, [&](const std::string& name, const std::vector<float>& values) {
    if (name.starts_with(group)) tensors[name.substr(group.size())] = values;
  });
  return tensors;
}

// Equal bit for bit (float == would take -0 for +0).
bool bitwise_equal(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, values] : a) {
    const auto other = b.find(name);
    if (other == b.end() || other->second.size() != values.size() ||
        std::memcmp(values.data(), other->second.data(), values.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

bool all_zero(const Tensors& tensors) {
  for (const auto& [name, values] : tensors)
    for (float v : values)
      if (v != 0.0f) return false;
  return true;
}

std::size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.starts_with(prefix) ? 1 : 0;
  return n;
}

// One data set and two trained checkpoints for every test: a plain run's (3 steps) and a DiLoCo
// run's, stopped mid-period (step 3 of 4-step periods) so that its two workers' weights differ.
class TrainInitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("train_init");
    testing::write_synthetic_dataset(*dir_ / "data", 64, 60000);
    const auto base = train(1, config("base"));
    ASSERT_EQ(base.status, 0) << base.output;
    const auto diloco =
        train(2, config("diloco_base", kDiloco), "--set train.steps=4 --set train.stop_after=3");
    ASSERT_EQ(diloco.status, 0) << diloco.output;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static constexpr const char* kDiloco = "diloco: {enabled: true, workers: 2, inner_steps: 4}\n";

  static std::string config(const std::string& name, const std::string& extra = "") {
    const std::string path = *dir_ / (name + ".yaml");
    std::ofstream(path) << "run: {name: " << name << ", dir: " << dir_->str() << "/runs, seed: 5}\n"
                        << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, "
                           "vocab_size: 64}\n"
                        << "data: {train: " << dir_->str() << "/data/train}\n"
                        << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 2}\n"
                        << "train: {steps: 3, global_batch: 8, micro_batch: 2, eval_every: 0, "
                           "log_every: 1}\n"
                        << "checkpoint: {every: 0, keep: 0}\n"
                        << "device: cpu\n"
                        << extra;
    return path;
  }
  static testing::CommandResult train(int ranks, const std::string& config,
                                      const std::string& args = "",
                                      const std::string& environment = "") {
    return testing::run_command("OMP_NUM_THREADS=1 " + environment + " " +
                                (ranks > 1 ? testing::mpirun(ranks) : "") + testing::bin("train") +
                                " " + config + " " + args);
  }
  static std::string checkpoint(const std::string& run, int step) {
    return dir_->str() + "/runs/" + run + "/checkpoints/" + checkpoint_file_name(step);
  }
  static std::string metrics(const std::string& run) {
    return dir_->str() + "/runs/" + run + "/metrics.jsonl";
  }
  static std::string base() { return checkpoint("base", 3); }
  static std::string diloco_base() { return checkpoint("diloco_base", 3); }

  // A run of `ranks` with `extra` config that starts from `source` and skips its one step: its
  // step-1 checkpoint holds the weights and moments it started with.
  static std::string started_from(const std::string& source, const std::string& name, int ranks,
                                  const std::string& extra) {
    const auto r = train(ranks, config(name, extra), "--init " + source + " --set train.steps=1",
                         "STRATA_TEST_HOOKS=nonfinite_steps=1");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("initialised from " + source + " (step 3 of its run)"),
              std::string::npos)
        << r.output;
    return checkpoint(name, 1);
  }

  static std::unique_ptr<TempDir> dir_;
};

std::unique_ptr<TempDir> TrainInitTest::dir_;

// --init is a resume of the checkpoint's weights with everything else fresh: the same losses,
// learning rates and final state, bit for bit, as a resume of a step-0 checkpoint holding only
// those weights (what `ckpt import-hf` writes). Its first line in metrics.jsonl says where the
// weights came from, and a resume of the new run continues it without --init.
TEST_F(TrainInitTest, StartsANewRunFromTheWeightsAloneAndResumesAsAnyRun) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  Checkpoint weights_only = read_checkpoint(base(), layout, false);
  weights_only.state = CheckpointState{0, 0, 5, 1.0, 0, -1};
  weights_only.adam_m.assign(weights_only.params.size(), 0.0f);
  weights_only.adam_v.assign(weights_only.params.size(), 0.0f);
  const std::string fresh = write_checkpoint(*dir_ / "weights_only", kShape, layout, weights_only);

  const auto init = train(1, config("init"), "--init=" + base() + " --set train.steps=2");
  ASSERT_EQ(init.status, 0) << init.output;
  EXPECT_NE(init.output.find("initialised from " + base() + " (step 3 of its run)"),
            std::string::npos)
      << init.output;
  const auto resumed = train(1, config("reference"), "--resume " + fresh + " --set train.steps=2");
  ASSERT_EQ(resumed.status, 0) << resumed.output;

  const std::vector<double> loss = testing::metric_values(metrics("init"), "loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss, testing::metric_values(metrics("reference"), "loss"));
  EXPECT_EQ(testing::metric_values(metrics("init"), "lr"),
            testing::metric_values(metrics("reference"), "lr"));
  // Not the seed's weights: those gave the base run's first loss.
  EXPECT_NE(loss[0], testing::metric_values(metrics("base"), "loss")[0]);
  const auto diff = testing::run_command(testing::bin("ckpt") + " diff " + checkpoint("init", 2) +
                                         " " + checkpoint("reference", 2));
  EXPECT_EQ(diff.status, 0) << diff.output;

  std::ifstream lines(metrics("init"));
  std::string first;
  std::getline(lines, first);
  const std::string record = "{\"step\": 0, \"init\": \"" + base() + "\", \"init_step\": 3}";
  EXPECT_EQ(first, record);
  const auto continued = train(1, config("init"), "--resume");
  ASSERT_EQ(continued.status, 0) << continued.output;
  EXPECT_NE(continued.output.find("resumed from " + checkpoint("init", 2) + " at step 2"),
            std::string::npos)
      << continued.output;
  EXPECT_TRUE(fs::exists(checkpoint("init", 3)));
  EXPECT_EQ(testing::metric_values(metrics("init"), "loss").size(), 3u);
  std::ifstream again(metrics("init"));
  std::getline(again, first);
  EXPECT_EQ(first, record);
}

// Tensor parallelism, pipeline stages, and ZeRO 3's shards of the master weights each read their
// part of the logical tensors: every layout starts from the checkpoint's weights, bitwise, with
// zero moments (the base run's are not).
TEST_F(TrainInitTest, EveryLayoutStartsFromTheCheckpointsWeightsBitwise) {
  const Tensors weights = tensors_in(base(), "/model/");
  ASSERT_FALSE(all_zero(tensors_in(base(), "/optimizer/m/")));
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"tp2", "parallel: {tp: 2}\n"},
      {"pp2", "parallel: {pp: 2}\n"},
      {"dp2_zero3", "parallel: {zero: {stage: 3}}\n"}};
  for (const auto& [name, extra] : layouts) {
    SCOPED_TRACE(name);
    const std::string started = started_from(base(), name, 2, extra);
    EXPECT_TRUE(bitwise_equal(tensors_in(started, "/model/"), weights));
    EXPECT_TRUE(all_zero(tensors_in(started, "/optimizer/m/")));
    EXPECT_TRUE(all_zero(tensors_in(started, "/optimizer/v/")));
  }
}

// Both DiLoCo workers start from the weights, and so does the anchor their first outer step
// measures from (Diloco::start runs after the weights are set, not on the seed's).
TEST_F(TrainInitTest, EveryDilocoWorkerAndTheAnchorStartFromTheWeights) {
  const Tensors weights = tensors_in(base(), "/model/");
  const std::string started = started_from(base(), "diloco_init", 2, kDiloco);
  EXPECT_TRUE(bitwise_equal(tensors_in(started, "/model/"), weights));
  EXPECT_TRUE(bitwise_equal(tensors_in(started, "/diloco/worker_1/model/"), weights));
  EXPECT_TRUE(bitwise_equal(tensors_in(started, "/outer/anchor/"), weights));
}

// A DiLoCo checkpoint gives its first worker's weights (the plain /model names) to any run.
TEST_F(TrainInitTest, ADilocoCheckpointGivesItsFirstWorkersWeights) {
  const Tensors first_worker = tensors_in(diloco_base(), "/model/");
  ASSERT_FALSE(bitwise_equal(first_worker, tensors_in(diloco_base(), "/diloco/worker_1/model/")));
  const std::string started = started_from(diloco_base(), "from_diloco", 2, "parallel: {tp: 2}\n");
  EXPECT_TRUE(bitwise_equal(tensors_in(started, "/model/"), first_worker));
}

// Expert parallelism reads each rank's experts of a mixture-of-experts checkpoint; the MoE keys
// that only shape training (capacity_factor here) may change, the number of experts may not.
TEST_F(TrainInitTest, ExpertParallelRanksStartFromAnMoeCheckpointsWeights) {
  const std::string moe = "--set model.moe.experts=4 --set model.moe.top_k=2 ";
  const auto base = train(1, config("moe_base"), moe + "--set train.steps=2");
  ASSERT_EQ(base.status, 0) << base.output;
  const std::string source = checkpoint("moe_base", 2);
  const auto r =
      train(2, config("moe_ep2", "parallel: {ep: 2}\n"),
            moe + "--init " + source + " --set train.steps=1 --set model.moe.capacity_factor=2",
            "STRATA_TEST_HOOKS=nonfinite_steps=1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(experts over ep 2)"), std::string::npos) << r.output;
  EXPECT_TRUE(bitwise_equal(tensors_in(checkpoint("moe_ep2", 1), "/model/"),
                            tensors_in(source, "/model/")));
  const auto other =
      train(1, config("moe_other"), moe + "--init " + source + " --set model.moe.experts=2");
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("error: --init " + source +
                              ": model.moe.experts is 4 in the checkpoint but 2 in this run"),
            std::string::npos)
      << other.output;
}

// Each refusal is one error line, before any step (and before any checkpoint of the new run).
TEST_F(TrainInitTest, RefusalsAreOneErrorLineBeforeAnyTraining) {
  const auto expect_refused = [](const testing::CommandResult& r, const std::string& message) {
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
    EXPECT_NE(r.output.find("error: " + message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << r.output;
  };
  // Another shape, and another n_head (no tensor's shape changes: the configs say so), on two
  // ranks: rank 0 speaks for both.
  expect_refused(train(2, config("layers"), "--init " + base() + " --set model.n_layer=3"),
                 "--init " + base() + ": model.n_layer is 2 in the checkpoint but 3 in this run");
  expect_refused(train(1, config("heads"), "--init " + base() + " --set model.n_head=4"),
                 "--init " + base() + ": model.n_head is 2 in the checkpoint but 4 in this run");
  const std::string missing = *dir_ / "missing.h5";
  expect_refused(train(1, config("missing"), "--init " + missing),
                 "--init " + missing + ": checkpoint '" + missing + "' does not exist");
  const std::string damaged = *dir_ / "damaged.h5";
  fs::copy_file(base(), damaged, fs::copy_options::overwrite_existing);
  fs::resize_file(damaged, fs::file_size(damaged) - 100);
  expect_refused(train(1, config("damaged"), "--init " + damaged), "--init " + damaged + ": ");
  expect_refused(train(1, config("both"), "--init " + base() + " --resume"),
                 "--init and --resume cannot be combined");
  expect_refused(train(1, config("bare"), "--init"), "--init needs a CHECKPOINT");
  for (const char* run : {"layers", "heads", "missing", "damaged", "both"})
    EXPECT_FALSE(fs::exists(checkpoint(run, 1))) << run;
}

}  // namespace
}  // namespace strata
