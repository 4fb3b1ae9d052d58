// How a run survives what goes wrong, through the `train` and `ckpt` executables: non-finite
// steps under train.nonfinite (injected by the test hook nonfinite_steps, train/core/test_hooks.h),
// a flipped bit or a truncated checkpoint (named in one error line by `ckpt verify`, skipped with a
// warning by `--resume`), a write that fails for lack of space (RLIMIT_FSIZE: every earlier
// checkpoint intact), and the temporary file of a job killed while writing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "data/hdf5_handle.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/core/test_hooks.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

class RunRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_synthetic_dataset(dir_ / "data", 64, 60000); }

  std::string config(const std::string& name) const {
    const std::string path = dir_ / (name + ".yaml");
    std::ofstream(path)
        << "run: {name: " << name << ", dir: " << dir_.str() << "/runs, seed: 7}\n"
        << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
        << "data: {train: " << dir_.str() << "/data/train, val: " << dir_.str() << "/data/val}\n"
        << "optimizer: {lr: 3.0e-3, warmup_steps: 2}\n"
        << "train: {steps: 8, global_batch: 8, micro_batch: 4, eval_every: 0, "
           "eval_tokens: 2048, log_every: 1}\n"
        << "checkpoint: {every: 2, keep: 0}\n"
        << "device: cpu\n";
    return path;
  }
  std::string checkpoints(const std::string& name) const {
    return dir_.str() + "/runs/" + name + "/checkpoints";
  }
  std::string checkpoint(const std::string& name, int step) const {
    return checkpoints(name) + "/" + checkpoint_file_name(step);
  }
  static testing::CommandResult train(const std::string& config, const std::string& args = "",
                                      const std::string& environment = "") {
    return testing::run_command(environment + " " + testing::bin("train") + " " + config + " " +
                                args);
  }
  static testing::CommandResult ckpt(const std::string& args) {
    return testing::run_command(testing::bin("ckpt") + " " + args);
  }
  // The uninterrupted run every recovered one must reproduce bit for bit.
  std::string reference() {
    if (reference_.empty()) {
      const auto r = train(config("reference"));
      EXPECT_EQ(r.status, 0) << r.output;
      reference_ = checkpoint("reference", 8);
    }
    return reference_;
  }
  void expect_same_final_state(const std::string& name) {
    const auto d = ckpt("diff " + reference() + " " + checkpoint(name, 8));
    EXPECT_EQ(d.status, 0) << d.output;
    EXPECT_NE(d.output.find("identical"), std::string::npos) << d.output;
  }

  TempDir dir_{"run_recovery"};
  std::string reference_;
};

std::size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.starts_with(prefix) ? 1 : 0;
  return n;
}

// Flips one bit in the middle of a tensor's data, found through HDF5 (contiguous layout).
void flip_bit_in_tensor(const std::string& path, const std::string& tensor) {
  haddr_t offset;
  hsize_t size;
  {
    H5File file = H5File::open_read(path);
    H5Id dataset = open_dataset(file.id(), tensor);
    offset = H5Dget_offset(dataset.get());
    size = H5Dget_storage_size(dataset.get());
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset + size / 2));
  char byte;
  f.get(byte);
  byte = static_cast<char>(byte ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset + size / 2));
  f.put(byte);
}

TEST_F(RunRecoveryTest, SkipPolicySkipsANonFiniteStepAndGoesOn) {
  const auto r = train(config("skip"), "", "STRATA_TEST_HOOKS=nonfinite_steps=5");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string metrics = testing::read_file(dir_.str() + "/runs/skip/metrics.jsonl");
  // Exactly the injected step is reported skipped.
  std::istringstream lines(metrics);
  int skipped_steps = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find("\"skipped\": true") != std::string::npos) {
      ++skipped_steps;
      EXPECT_NE(line.find("\"step\": 5,"), std::string::npos) << line;
    }
  EXPECT_EQ(skipped_steps, 1) << metrics;
  EXPECT_TRUE(fs::exists(checkpoint("skip", 8)));
}

TEST_F(RunRecoveryTest, SkipPolicyStopsAfterTheLimitInARow) {
  const auto r = train(config("limit"), "--set train.nonfinite_limit=2",
                       "STRATA_TEST_HOOKS=nonfinite_steps=5,6");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("non-finite for 2 steps in a row at step 6"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the last checkpoint, step 4, is intact"), std::string::npos) << r.output;
  EXPECT_EQ(latest_checkpoint(checkpoints("limit")).value_or(""), checkpoint("limit", 4));
}

// A run that diverged before its first checkpoint once said "the last checkpoint is intact", and
// the steps it skipped on the way were not shown between log lines.
TEST_F(RunRecoveryTest, AStopBeforeTheFirstCheckpointSaysSoAndShowsTheSkippedSteps) {
  const auto r = train(config("early"),
                       "--set train.nonfinite_limit=2 --set train.log_every=100 "
                       "--set checkpoint.every=4",
                       "STRATA_TEST_HOOKS=nonfinite_steps=2,3");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("non-finite for 2 steps in a row at step 3 (train.nonfinite_limit); "
                          "stopping before the first checkpoint: there is nothing to resume"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("intact"), std::string::npos) << r.output;
  for (const std::string step : {"step      2/8", "step      3/8"})
    EXPECT_NE(r.output.find(step), std::string::npos) << step << " is not shown\n" << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "step "), 3u) << r.output;  // 1, and the two skipped
  const std::string metrics = testing::read_file(dir_.str() + "/runs/early/metrics.jsonl");
  EXPECT_NE(metrics.find("{\"step\": 3, "), std::string::npos) << metrics;
  EXPECT_FALSE(latest_checkpoint(checkpoints("early")).has_value());
}

TEST_F(RunRecoveryTest, StopPolicyStopsAtTheFirstAndTheRunResumesExactly) {
  const std::string cfg = config("stop");
  const auto r = train(cfg, "--set train.nonfinite=stop", "STRATA_TEST_HOOKS=nonfinite_steps=5");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("non-finite at step 5 (train.nonfinite: stop); stopping: the last "
                          "checkpoint, step 4, is intact (--resume continues from it)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(latest_checkpoint(checkpoints("stop")).value_or(""), checkpoint("stop", 4));
  const auto resumed = train(cfg, "--resume --set train.nonfinite=stop");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_same_final_state("stop");
}

// A resume with another train.steps once reshaped the learning-rate schedule without a word; one
// with another tokenizer would give the ids other meanings.
TEST_F(RunRecoveryTest, AResumeNamesTheKeysItChangesAndRefusesAnotherTokenizer) {
  const std::string cfg = config("changed");
  for (const auto& [name, vocab] : {std::pair<std::string, int>{"a", 300}, {"b", 310}}) {
    const Tokenizer tokenizer = testing::small_tokenizer(vocab);
    std::ofstream(dir_ / (name + ".model"), std::ios::binary) << tokenizer.serialized();
  }
  const std::string with_a = " --set data.tokenizer=" + (dir_ / "a.model");
  ASSERT_EQ(train(cfg, "--set train.stop_after=4" + with_a).status, 0);
  const auto resumed =
      train(cfg, "--resume --set train.steps=6 --set optimizer.beta2=0.9" + with_a);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("warning: --resume: train.steps is 6, 8 in the checkpoint's run; "
                                "the learning-rate schedule changes from step 4\n"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("warning: --resume: optimizer.beta2 is 0.9, 0.95 in the "
                                "checkpoint's run\n"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(count_lines_starting(resumed.output, "warning: --resume:"), 2u) << resumed.output;

  const auto other = train(cfg, "--resume --set data.tokenizer=" + (dir_ / "b.model"));
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find("error: --resume: data.tokenizer '" + (dir_ / "b.model") +
                              "' is not the tokenizer of checkpoint '"),
            std::string::npos)
      << other.output;
}

TEST_F(RunRecoveryTest, StopPolicyStopsEveryRankTogetherWithOneErrorLine) {
  const auto r = testing::run_command("OMP_NUM_THREADS=1 STRATA_TEST_HOOKS=nonfinite_steps=3 " +
                                      testing::mpirun(2) + testing::bin("train") + " " +
                                      config("stop_dp") + " --set train.nonfinite=stop");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("non-finite at step 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
}

TEST(TestHooks, ParseEveryHookAndRefuseWhatIsNotOne) {
  EXPECT_TRUE(TestHooks::parse("").empty());
  const TestHooks hooks = TestHooks::parse(
      " nonfinite_steps=5,7 step_seconds=0.25  kill_in_update=8 kill_in_averaging=20");
  EXPECT_EQ(hooks.nonfinite_steps, (std::set<std::int64_t>{5, 7}));
  EXPECT_EQ(hooks.step_seconds, 0.25);
  EXPECT_EQ(hooks.kill_in_update, 8);
  EXPECT_EQ(hooks.kill_in_averaging, 20);
  EXPECT_FALSE(hooks.empty());
  for (const char* bad :
       {"nonfinite_step=5", "nonfinite_steps=5,x", "nonfinite_steps=", "kill_in_update",
        "step_seconds=-1", "step_seconds=fast", "kill_in_averaging=2.5"})
    EXPECT_THROW(TestHooks::parse(bad), Error) << bad;
}

TEST_F(RunRecoveryTest, AnUnknownTestHookIsOneErrorLineBeforeAnyWork) {
  const auto r = train(config("bad_hook"), "", "STRATA_TEST_HOOKS=kill_in_updates=3");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("error: STRATA_TEST_HOOKS: unknown hook 'kill_in_updates'"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/bad_hook")) << r.output;
}

TEST_F(RunRecoveryTest, AFlippedBitIsNamedAndResumeFallsBackToThePreviousCheckpoint) {
  const std::string cfg = config("flipped");
  ASSERT_EQ(train(cfg, "--set train.stop_after=6").status, 0);
  const std::string newest = checkpoint("flipped", 6);
  ASSERT_EQ(ckpt("verify " + newest).status, 0);
  flip_bit_in_tensor(newest, "/optimizer/v/h.1.mlp.fc.weight");
  const std::string damaged_bytes = testing::read_file(newest);

  const auto verify = ckpt("verify " + newest);
  EXPECT_EQ(verify.status, 1) << verify.output;
  EXPECT_EQ(count_lines_starting(verify.output, "error: "), 1u) << verify.output;
  EXPECT_NE(verify.output.find("tensor '/optimizer/v/h.1.mlp.fc.weight' fails its checksum"),
            std::string::npos)
      << verify.output;

  const auto resumed = train(cfg, "--resume --set train.stop_after=0");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(count_lines_starting(resumed.output, "warning: skipping checkpoint '" + newest), 1u)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + checkpoint("flipped", 4)), std::string::npos)
      << resumed.output;
  expect_same_final_state("flipped");
  // Training through step 6 again replaced the damaged file with an intact one.
  EXPECT_FALSE(testing::read_file(newest) == damaged_bytes);
  EXPECT_EQ(ckpt("verify " + newest).status, 0);
}

TEST_F(RunRecoveryTest, ATruncatedCheckpointIsNamedAndSkipped) {
  const std::string cfg = config("truncated");
  ASSERT_EQ(train(cfg, "--set train.stop_after=6").status, 0);
  const std::string newest = checkpoint("truncated", 6);
  fs::resize_file(newest, fs::file_size(newest) / 2);
  const auto verify = ckpt("verify " + newest);
  EXPECT_EQ(verify.status, 1) << verify.output;
  EXPECT_EQ(count_lines_starting(verify.output, "error: "), 1u) << verify.output;
  EXPECT_NE(verify.output.find(newest), std::string::npos) << verify.output;
  // What a job killed while writing leaves: a hidden temporary file, removed on resume.
  const std::string abandoned = checkpoints("truncated") + "/.step_00000008.h5.tmp12345";
  std::ofstream(abandoned) << "partial";

  const auto resumed = train(cfg, "--resume --set train.stop_after=0");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("warning: skipping checkpoint '" + newest), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + checkpoint("truncated", 4)), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("warning: removed '.step_00000008.h5.tmp12345'"), std::string::npos)
      << resumed.output;
  EXPECT_FALSE(fs::exists(abandoned));
  expect_same_final_state("truncated");
}

TEST_F(RunRecoveryTest, NoIntactCheckpointIsAnErrorNamingTheDamage) {
  const std::string cfg = config("all_damaged");
  ASSERT_EQ(train(cfg, "--set train.steps=2").status, 0);
  fs::resize_file(checkpoint("all_damaged", 2), 1000);
  const auto r = train(cfg, "--resume --set train.steps=2");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("no intact checkpoint"), std::string::npos) << r.output;
}

TEST_F(RunRecoveryTest, AFailedWriteLeavesEveryEarlierCheckpointIntact) {
  const std::string cfg = config("full_disk");
  ASSERT_EQ(train(cfg, "--set train.stop_after=4").status, 0);
  const std::string two = testing::read_file(checkpoint("full_disk", 2));
  const std::string four = testing::read_file(checkpoint("full_disk", 4));
  // A file size limit below one checkpoint: the step-6 write fails as on a full disk (EFBIG;
  // `train` ignores the SIGXFSZ that would otherwise kill it). PMIx keeps its start-up data in a
  // hash rather than in shared-memory files, which the limit would refuse before training begins.
  const std::size_t limit_kib = four.size() / 2 / 1024;
  const auto r = testing::run_command(
      "PMIX_MCA_gds=hash bash -c \"ulimit -f " + std::to_string(limit_kib) + "; exec " +
      testing::bin("train") + " " + cfg + " --resume --set train.stop_after=0\"");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("error: cannot write checkpoint '" + checkpoint("full_disk", 6)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("earlier checkpoints are untouched"), std::string::npos) << r.output;
  EXPECT_TRUE(testing::read_file(checkpoint("full_disk", 2)) == two);
  EXPECT_TRUE(testing::read_file(checkpoint("full_disk", 4)) == four);
  EXPECT_FALSE(fs::exists(checkpoint("full_disk", 6)));
  for (const auto& entry : fs::directory_iterator(checkpoints("full_disk")))
    EXPECT_FALSE(entry.path().filename().string().starts_with(".")) << entry.path();
  // With space again the run continues from step 4 to the uninterrupted run's end.
  const auto resumed = train(cfg, "--resume --set train.stop_after=0");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_same_final_state("full_disk");
}

TEST_F(RunRecoveryTest, AFailedWriteOnSeveralRanksStopsThemAllWithOneErrorLine) {
  const std::string cfg = config("full_disk_dp");
  const std::string mpirun = "OMP_NUM_THREADS=1 " + testing::mpirun(2) + testing::bin("train") +
                             " " + cfg + " --set parallel.zero.stage=1";
  ASSERT_EQ(testing::run_command(mpirun + " --set train.stop_after=4").status, 0);
  const std::string four = testing::read_file(checkpoint("full_disk_dp", 4));
  const std::size_t limit_kib = four.size() / 2 / 1024;
  // Open MPI's shared-memory files would exceed the limit too: its ranks talk over TCP here.
  const auto r =
      testing::run_command("PMIX_MCA_gds=hash OMPI_MCA_btl=self,tcp bash -c \"ulimit -f " +
                           std::to_string(limit_kib) + "; " + mpirun + " --resume\"");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("error: cannot write checkpoint '" + checkpoint("full_disk_dp", 6)),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  EXPECT_TRUE(testing::read_file(checkpoint("full_disk_dp", 4)) == four);
  EXPECT_FALSE(fs::exists(checkpoint("full_disk_dp", 6)));
}

// Checkpoints of format 3 (written before format 4's XXH3-64 checksums) still resume, and the run
// continues exactly; what it writes from then on is format 4.
TEST_F(RunRecoveryTest, AFormat3CheckpointResumesExactly) {
  const std::string cfg = config("format3");
  ASSERT_EQ(train(cfg, "--set train.stop_after=4").status, 0);
  for (int step : {2, 4}) testing::rewrite_as_format_3(checkpoint("format3", step));
  const auto old = ckpt("verify " + checkpoint("format3", 4));
  EXPECT_EQ(old.status, 0) << old.output;
  EXPECT_NE(old.output.find("worker(s), strata-checkpoint-3"), std::string::npos) << old.output;
  const auto resumed = train(cfg, "--resume --set train.stop_after=0");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + checkpoint("format3", 4)), std::string::npos)
      << resumed.output;
  expect_same_final_state("format3");
  const auto now = ckpt("verify " + checkpoint("format3", 8));
  EXPECT_NE(now.output.find("worker(s), strata-checkpoint-4"), std::string::npos) << now.output;
}

TEST_F(RunRecoveryTest, VerifyAndDiffReportOnWholeFiles) {
  const std::string cfg = config("tools");
  ASSERT_EQ(train(cfg, "--set train.steps=4").status, 0);
  const auto ok = ckpt("verify " + checkpoint("tools", 2) + " " + checkpoint("tools", 4));
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_EQ(count_lines_starting(ok.output, "ok "), 2u) << ok.output;
  EXPECT_NE(ok.output.find("step 4, 84 tensors"), std::string::npos) << ok.output;
  const auto same = ckpt("diff " + checkpoint("tools", 4) + " " + checkpoint("tools", 4));
  EXPECT_EQ(same.status, 0) << same.output;
  const auto differ = ckpt("diff " + checkpoint("tools", 2) + " " + checkpoint("tools", 4));
  EXPECT_EQ(differ.status, 1) << differ.output;
  EXPECT_NE(differ.output.find("/model/wte: "), std::string::npos) << differ.output;
  const auto missing = ckpt("verify " + (dir_ / "none.h5"));
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.output.rfind("error: ", 0), 0u) << missing.output;
}

}  // namespace
}  // namespace strata
