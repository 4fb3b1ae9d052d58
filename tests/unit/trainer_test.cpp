// End-to-end training behaviour through the `train` executable: exact resume (bitwise), clean
// stop on SIGTERM, learning on structured data, and the error cases of bad input.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "model/gpt.h"
#include "tests/support/test_support.h"
#include "train/backend/cuda_training.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string write_config(const TempDir& dir, const std::string& name,
                         const std::string& extra = "") {
  const std::string path = dir / (name + ".yaml");
  std::ofstream(path)
      << "run: {name: " << name << ", dir: " << dir.str() << "/runs, seed: 5}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 4}\n"
      << "train: {steps: 20, global_batch: 8, micro_batch: 2, eval_every: 10, "
         "eval_tokens: 2048, log_every: 5}\n"
      << "checkpoint: {every: 10, keep: 0}\n"
      << "device: cpu\n"  // the CPU trainer, also where a GPU is present
      << extra;
  return path;
}

std::string train_command(const std::string& config, const std::string& args = "") {
  return testing::bin("train") + " " + config + " " + args;
}

std::vector<float> weights_of(const std::string& checkpoint) {
  const ParameterLayout layout = ParameterLayout::for_gpt(GptShape{2, 2, 32, 16, 64});
  return read_checkpoint(checkpoint, layout, true).params;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_synthetic_dataset(dir_ / "data", 64, 60000); }
  std::string run_dir(const std::string& name) const { return dir_.str() + "/runs/" + name; }
  TempDir dir_{"trainer"};
};

TEST_F(TrainerTest, ResumeContinuesTheSameRunBitExactly) {
  // Straight: 20 steps.
  const auto straight = testing::run_command(train_command(write_config(dir_, "straight")));
  ASSERT_EQ(straight.status, 0) << straight.output;
  // Split: the same run stopped after 10 steps, then resumed for the last 10.
  const std::string split_config = write_config(dir_, "split");
  const auto first = testing::run_command(train_command(split_config, "--set train.stop_after=10"));
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_TRUE(fs::exists(run_dir("split") + "/checkpoints/step_00000010.h5"));
  ASSERT_FALSE(fs::exists(run_dir("split") + "/checkpoints/step_00000020.h5"));
  const auto second = testing::run_command(train_command(split_config, "--resume"));
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos);

  const auto losses_straight =
      testing::metric_values(run_dir("straight") + "/metrics.jsonl", "loss");
  const auto losses_split = testing::metric_values(run_dir("split") + "/metrics.jsonl", "loss");
  ASSERT_EQ(losses_straight.size(), 20u);
  EXPECT_EQ(losses_straight, losses_split);  // exact, printed with 17 significant digits
  EXPECT_EQ(testing::metric_values(run_dir("straight") + "/metrics.jsonl", "val_loss"),
            testing::metric_values(run_dir("split") + "/metrics.jsonl", "val_loss"));
  EXPECT_EQ(weights_of(run_dir("straight") + "/checkpoints/step_00000020.h5"),
            weights_of(run_dir("split") + "/checkpoints/step_00000020.h5"));
}

TEST_F(TrainerTest, SigtermSavesACheckpointAndTheRunResumesExactly) {
  const std::string long_run =
      "--set train.steps=400 --set train.eval_every=0 --set train.log_every=1 --set "
      "checkpoint.every=0";
  const auto straight =
      testing::run_command(train_command(write_config(dir_, "straight"), long_run));
  ASSERT_EQ(straight.status, 0) << straight.output;

  const std::string config = write_config(dir_, "signalled");
  const std::string log = dir_ / "signalled.log";
  // Start in the background, send SIGTERM once training is under way, collect the exit status.
  // The wait ends at step 20; its 60 s cap only matters on a loaded machine, where a SIGTERM sent
  // before the handler is installed would end the run by the default action instead.
  const auto interrupted =
      testing::run_command("(" + train_command(config, long_run) + " > " + log +
                           " 2>&1 & pid=$!; "
                           "for i in $(seq 1200); do grep -q 'step *20/' " +
                           log +
                           " && break; sleep 0.05; done; "
                           "kill -TERM $pid; wait $pid; echo exit=$?)");
  EXPECT_NE(interrupted.output.find("exit=0"), std::string::npos) << interrupted.output;
  const std::string output = testing::read_file(log);
  ASSERT_NE(output.find("stopped by signal at step"), std::string::npos) << output;
  const auto latest = latest_checkpoint(run_dir("signalled") + "/checkpoints");
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->find("step_00000400"), std::string::npos) << "the signal arrived too late";

  const auto resumed = testing::run_command(train_command(config, long_run + " --resume"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(weights_of(run_dir("straight") + "/checkpoints/step_00000400.h5"),
            weights_of(run_dir("signalled") + "/checkpoints/step_00000400.h5"));
}

TEST_F(TrainerTest, LearnsTheStructureOfTheData) {
  const auto result = testing::run_command(
      train_command(write_config(dir_, "learn"), "--set train.steps=150 --set train.eval_every=0"));
  ASSERT_EQ(result.status, 0) << result.output;
  const auto val = testing::metric_values(run_dir("learn") + "/metrics.jsonl", "val_loss");
  ASSERT_FALSE(val.empty());
  // Uniform guessing over 64 tokens costs ln 64 = 4.16; the chain has ~3 successors (ln 3 = 1.1).
  EXPECT_LT(val.back(), 2.0);
}

// Every bad input: non-zero exit, exactly one line starting with "error:", and nothing damaged.
void expect_clean_error(const testing::CommandResult& r, const std::string& fragment) {
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << r.output;
}

TEST_F(TrainerTest, BadInputGetsOneClearErrorAndLeavesCheckpointsUntouched) {
  const std::string config = write_config(dir_, "guarded");
  ASSERT_EQ(testing::run_command(train_command(config, "--set train.steps=10")).status, 0);
  const std::string ckpt = run_dir("guarded") + "/checkpoints/step_00000010.h5";
  const std::string before = testing::read_file(ckpt);

  expect_clean_error(testing::run_command(train_command(config, "--set optimizer.lrr=1")),
                     "did you mean 'optimizer.lr'");
  expect_clean_error(testing::run_command(train_command(config)), "--resume");
  expect_clean_error(testing::run_command(train_command(dir_ / "missing.yaml")), "missing.yaml");
  expect_clean_error(testing::run_command(train_command(config, "--bogus")), "--bogus");
  expect_clean_error(testing::run_command(
                         train_command(config, "--resume --set data.train=" + (dir_ / "nowhere"))),
                     "nowhere");
  expect_clean_error(testing::run_command(train_command(config, "--resume --set model.d_model=64")),
                     "d_model 32, seq_len 16, vocab_size 64 but this run's model is");
  expect_clean_error(testing::run_command(train_command(config, "--resume " + (dir_ / "none.h5"))),
                     "none.h5");
  // A damaged copy of the checkpoint is refused (checksums), the original stays intact.
  const std::string damaged = dir_ / "damaged.h5";
  std::string bytes = before;
  for (std::size_t i = bytes.size() / 2; i < bytes.size() / 2 + 64; ++i) bytes[i] ^= 0x5a;
  std::ofstream(damaged, std::ios::binary) << bytes;
  const auto r = testing::run_command(train_command(config, "--resume " + damaged));
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(testing::read_file(ckpt), before);
  // The vocabulary of the data must fit the model.
  expect_clean_error(testing::run_command(train_command(write_config(dir_, "small_vocab"),
                                                        "--set model.vocab_size=32")),
                     "vocabulary");
  // A device that is not there (no GPU here, or a build without CUDA).
  if (cuda_device_count() == 0)
    expect_clean_error(testing::run_command(train_command(config, "--resume --set device=cuda")),
                       "device cuda");
  EXPECT_EQ(testing::read_file(ckpt), before);
}

// A fresh run into a directory that holds an earlier run is refused (its metrics, config and
// checkpoints untouched), also when that run wrote no checkpoint there (checkpoint.dir elsewhere);
// --overwrite replaces it, removing its checkpoints so that no later --resume takes one of them.
TEST_F(TrainerTest, AFreshRunNeverReplacesAnEarlierOneUnlessTold) {
  const std::string elsewhere = dir_ / "elsewhere";
  const std::string config = write_config(dir_, "earlier");
  const std::string short_run =
      "--set train.steps=2 --set train.eval_every=0 --set checkpoint.dir=" + elsewhere;
  ASSERT_EQ(testing::run_command(train_command(config, short_run)).status, 0);
  const std::string metrics = run_dir("earlier") + "/metrics.jsonl";
  const std::string before = testing::read_file(metrics);
  ASSERT_FALSE(before.empty());
  expect_clean_error(testing::run_command(train_command(config, short_run)),
                     "run 'earlier' already holds an earlier run (" + metrics);
  EXPECT_EQ(testing::read_file(metrics), before);
  const auto replaced =
      testing::run_command(train_command(config, short_run + " --set run.seed=6 --overwrite"));
  ASSERT_EQ(replaced.status, 0) << replaced.output;
  EXPECT_NE(replaced.output.find("--overwrite: run 'earlier' starts afresh"), std::string::npos)
      << replaced.output;
  EXPECT_NE(testing::read_file(metrics), before);  // another seed, other losses
  // Checkpoints at 10 and 20 in the run's own directory: refused, then replaced by a run of 10
  // steps, whose step 10 is the only checkpoint left.
  const std::string twice = write_config(dir_, "twice");
  ASSERT_EQ(testing::run_command(train_command(twice)).status, 0);
  expect_clean_error(testing::run_command(train_command(twice)), "2 checkpoints in");
  ASSERT_EQ(testing::run_command(train_command(twice, "--set train.steps=10 --overwrite")).status,
            0);
  EXPECT_TRUE(fs::exists(run_dir("twice") + "/checkpoints/step_00000010.h5"));
  EXPECT_FALSE(fs::exists(run_dir("twice") + "/checkpoints/step_00000020.h5"));
  expect_clean_error(testing::run_command(train_command(twice, "--resume --overwrite")),
                     "--overwrite and --resume cannot be combined");
}

// One job at a time writes a run: a --resume started while the run trains is refused, naming the
// holder of the run directory's lock; once the holder is killed (SIGKILL: its lock left behind),
// the next job takes the lock over, saying so, and resumes.
TEST_F(TrainerTest, OneJobAtATimeWritesARunAndADeadOnesLockIsTakenOver) {
  const std::string config = write_config(dir_, "locked");
  const std::string run = "--set train.steps=60 --set checkpoint.every=5 --set train.log_every=1";
  const std::string log = dir_ / "locked.log";
  const auto both = testing::run_command(
      "(STRATA_TEST_HOOKS=step_seconds=0.2 " + train_command(config, run) + " > " + log +
      " 2>&1 & pid=$!; for i in $(seq 1200); do grep -q 'step *6/' " + log +
      " && break; sleep 0.05; done; " + train_command(config, run + " --resume") +
      "; echo second=$?; kill -KILL $pid; wait $pid; echo first=$?)");
  EXPECT_NE(both.output.find("error: run directory '" + run_dir("locked") +
                             "' is in use by another job (host "),
            std::string::npos)
      << both.output;
  EXPECT_NE(both.output.find("second=1"), std::string::npos) << both.output;
  EXPECT_NE(both.output.find("first=137"), std::string::npos) << both.output;  // killed
  const auto resumed = testing::run_command(train_command(config, run + " --resume"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("note: took over the lock of run directory"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("its pid is gone"), std::string::npos) << resumed.output;
  EXPECT_FALSE(fs::exists(run_dir("locked") + "/run.lock"));  // released at the end
}

TEST(DeviceChoice, CudaWhereADeviceAndTheShapeAllowIt) {
  Config config;
  const GptShape supported{2, 2, 64, 16, 64};    // head size 32
  const GptShape unsupported{2, 4, 32, 16, 64};  // head size 8: no attention kernel
  EXPECT_FALSE(cuda_supports_shape(unsupported));
  config.device = Device::cpu;
  EXPECT_EQ(resolve_device(config, supported), Device::cpu);
  config.device = Device::automatic;
  const bool usable = cuda_device_count() > 0;
  EXPECT_EQ(resolve_device(config, supported), usable ? Device::cuda : Device::cpu);
  EXPECT_EQ(resolve_device(config, unsupported), Device::cpu);  // auto falls back, never fails
  config.device = Device::cuda;
  try {
    resolve_device(config, unsupported);
    ADD_FAILURE() << "device cuda with head size 8 was accepted";
  } catch (const Error& e) {
    const std::string reason = usable ? "head size 8" : "no usable CUDA device";
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  if (!usable) {
    EXPECT_THROW(resolve_device(config, supported), Error);
  }
  // NCCL asked for, but auto lands on the CPU: an error, never a silent CPU run.
  config.device = Device::automatic;
  config.parallel.device_comm = DeviceComm::nccl;
  try {
    resolve_device(config, unsupported);
    ADD_FAILURE() << "device_comm nccl on a CPU run was accepted";
  } catch (const Error& e) {
    const std::string reason = usable ? "head size 8" : "no usable CUDA device";
    EXPECT_NE(std::string(e.what()).find("parallel.device_comm nccl"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  config.parallel.device_comm = DeviceComm::host;
  EXPECT_EQ(resolve_device(config, unsupported), Device::cpu);
}

// NCCL needs a GPU per rank: the choice from every rank's GPU identity.
TEST(DeviceCommChoice, NcclWhereEveryRankHasItsOwnGpu) {
  const std::vector<std::string> own = {"gpu-a", "gpu-b", "gpu-c", "gpu-d"};
  const std::vector<std::string> shared = {"gpu-a", "gpu-b", "gpu-a", "gpu-c"};
  const std::vector<std::string> alone = {"gpu-a"};
  EXPECT_TRUE(choose_nccl(DeviceComm::automatic, own));
  EXPECT_FALSE(
      choose_nccl(DeviceComm::automatic, shared));  // auto falls back to host staging, never fails
  EXPECT_FALSE(choose_nccl(DeviceComm::automatic, alone));  // nothing to exchange
  EXPECT_FALSE(choose_nccl(DeviceComm::host, own));
  EXPECT_TRUE(choose_nccl(DeviceComm::nccl, own));
  EXPECT_TRUE(choose_nccl(DeviceComm::nccl, alone));  // asked for: runs over a group of one
  try {
    choose_nccl(DeviceComm::nccl, shared);
    ADD_FAILURE() << "nccl with two ranks on one GPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("world ranks 0 and 2 compute on the same GPU"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
