// Elastic DiLoCo (train/diloco/elastic_worker.h) end to end: worker jobs, each its own mpirun,
// meet in a rendezvous store. A clean group of k jobs trains the in-job run of k workers; a worker
// killed in its inner phase is dropped and the others go on without it; one killed in the middle
// of the averaging makes the others meet again without it, as if it had died before; a fresh
// worker joins,
// takes the group's state bitwise and contributes from the next sync; bad settings and an
// unreachable store are one `error:` line. With a file store, then with a Redis server the test
// starts on a loopback port.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "parallel/comm/communicator.h"
#include "parallel/diloco/worker_averaging.h"
#include "parallel/elastic/rendezvous_store.h"
#include "tests/mpi/layout_runs.h"
#include "tests/support/background_process.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::Background;
using testing::Layout;
using testing::metric;
using testing::read_file;
using testing::run_command;
using testing::TempDir;

// A Redis server on a free loopback port, for the test's lifetime.
class RedisServer {
 public:
  RedisServer() {
    EXPECT_EQ(run_command("command -v redis-server").status, 0)
        << "redis-server is not installed (scripts/setup.sh installs it)";
    for (port_ = 16379 + ::getpid() % 1000;; ++port_) {
      if (run_command("redis-cli -p " + std::to_string(port_) + " ping").output.find("PONG") ==
          std::string::npos)
        break;
    }
    server_ = std::make_unique<Background>("exec redis-server --port " + std::to_string(port_) +
                                               " --bind 127.0.0.1 --save '' --appendonly no",
                                           "/dev/null");
    for (int i = 0; i < 100; ++i) {
      if (run_command("redis-cli -p " + std::to_string(port_) + " ping").output.find("PONG") !=
          std::string::npos)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "redis-server did not answer on port " << port_;
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Stops it answering (SIGSTOP: connections stay open, requests wait), and lets it go on.
  void pause() { ::kill(server_->pid(), SIGSTOP); }
  void resume() { ::kill(server_->pid(), SIGCONT); }

 private:
  int port_ = 0;
  std::unique_ptr<Background> server_;
};

// A worker job's layout: its ranks and their settings.
struct WorkerLayout {
  int ranks = 1;
  std::string settings;
};

class ElasticRuns : public testing::LayoutSuite<ElasticRuns> {
 public:
  static constexpr const char* kTag = "elastic";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }

 protected:
  // When slot 2 dies: 7 steps before the sync after step 20, or between the two pieces of its
  // averaging (the test hook kill_in_averaging).
  enum class Death { inner_phase, averaging };
  // `resume`: the killed worker restarts with --resume (from its checkpoint at step 10) instead
  // of a fresh one joining. `more`: settings added to every worker's. `layouts`: workers 0 to 2's
  // and the fresh one's, with diloco.layouts any (empty: one rank each).
  static void kill_and_join(const std::string& store, const std::string& tag, bool resume,
                            Death death = Death::inner_phase, const std::string& more = "",
                            const std::vector<WorkerLayout>& layouts = {});
  // `layouts`: each slot's, with diloco.layouts any (empty: one rank each).
  static void expect_the_in_job_run(const std::string& tag, const std::string& extra,
                                    const std::vector<WorkerLayout>& layouts = {});
  // Slot 2 killed in the averaging of the sync after step 20, and (another group) in its inner
  // phase: the same training, bit for bit.
  static void expect_retry_without_the_dead(const std::string& tag, const std::string& more);

  // `train` on one rank (or on `layout`) as slot `slot` (-1: the first free) of `group` in
  // `store`.
  static std::string worker_command(const std::string& store, const std::string& group, int slot,
                                    const std::string& name, const std::string& extra,
                                    const WorkerLayout& layout = WorkerLayout{}) {
    return testing::mpirun(layout.ranks) + testing::bin("train") + " " + dir_->str() +
           "/config.yaml" + layout.settings + " --set run.name=" + name +
           " --set diloco.enabled=true --set diloco.workers=3" + " --set diloco.join=" + store +
           " --set diloco.group=" + group + " --set diloco.slot=" + std::to_string(slot) +
           " --set diloco.interface=lo" + extra;
  }
  static std::string run_dir(const std::string& name) { return dir_->str() + "/runs/" + name; }
  // The run's newest checkpoint.
  static std::string checkpoint(const std::string& run) {
    std::string newest;  // step_<8 digits>.h5: the last in name order
    for (const auto& entry : std::filesystem::directory_iterator(run + "/checkpoints"))
      newest = std::max(newest, entry.path().string());
    return newest;
  }

  // The outer_step line of `step` in the run's metrics ("" when there is none).
  static std::string outer_line(const std::string& run, std::int64_t step) {
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.find("\"outer_step\"") != std::string::npos &&
          line.starts_with("{\"step\": " + std::to_string(step) + ","))
        return line;
    return "";
  }
  // The steps of the run's outer_step lines.
  static std::vector<std::int64_t> outer_steps(const std::string& run) {
    std::vector<std::int64_t> steps;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.find("\"outer_step\"") != std::string::npos)
        steps.push_back(std::strtoll(line.c_str() + 9, nullptr, 10));  // after {"step":
    return steps;
  }
  // The number after "key": in that line (-1 when there is none).
  static double number_at(const std::string& run, const std::string& key, std::int64_t step) {
    const std::string line = outer_line(run, step);
    const std::size_t at = line.find("\"" + key + "\": ");
    return at == std::string::npos ? -1 : std::strtod(line.c_str() + at + key.size() + 4, nullptr);
  }
  // The numbers of the array after "key": [ in that line.
  static std::vector<double> array_at(const std::string& run, const std::string& key,
                                      std::int64_t step) {
    const std::string line = outer_line(run, step);
    const std::size_t at = line.find("\"" + key + "\": [");
    if (at == std::string::npos) return {};
    std::vector<double> values;
    const char* p = line.c_str() + at + key.size() + 5;
    while (*p != ']') {
      char* end = nullptr;
      values.push_back(std::strtod(p, &end));
      p = end;
      while (*p == ',' || *p == ' ') ++p;
    }
    return values;
  }
};

// Three worker jobs with a file store train what one job of three in-job workers trains: every
// outer step's norm, each worker's loss at every sync, and the final val_loss within 1e-4; the
// bytes they send across the worker boundary add up to the in-job run's. `extra`: the DiLoCo
// settings of both.
void ElasticRuns::expect_the_in_job_run(const std::string& tag, const std::string& extra,
                                        const std::vector<WorkerLayout>& layouts) {
  const std::string in_job =
      testing::train_ranks(*dir_, 3, Layout{}, tag + "_in_job",
                           " --set diloco.enabled=true --set diloco.workers=3" + extra);
  const std::string store = "file://" + dir_->str() + "/store_" + tag;
  std::vector<std::unique_ptr<Background>> jobs;
  const auto name = [&](int w) { return tag + "_" + std::to_string(w); };
  for (int w = 0; w < 3; ++w)
    jobs.push_back(std::make_unique<Background>(
        worker_command(store, tag, w, name(w),
                       extra + " --set diloco.min_workers=3" +
                           (layouts.empty() ? "" : " --set diloco.layouts=any"),
                       layouts.empty() ? WorkerLayout{} : layouts[static_cast<std::size_t>(w)]),
        dir_->str() + "/" + name(w) + ".log"));
  for (auto& job : jobs) ASSERT_EQ(job->wait(), 0) << job->output();
  const bool overlap = extra.find("diloco.overlap=true") != std::string::npos;
  const std::vector<double> norms = metric(in_job, "outer_grad_norm");
  ASSERT_FALSE(norms.empty()) << tag;
  const std::vector<std::int64_t> syncs = outer_steps(in_job);
  ASSERT_GE(syncs.size(), 4u) << tag;
  std::vector<double> sent(syncs.size(), 0.0);
  for (int w = 0; w < 3; ++w) {
    const std::string run = run_dir(name(w));
    ASSERT_EQ(outer_steps(run), syncs) << tag;
    // The in-job run reports its first worker's norm and evaluates its model (gossip and
    // moshpit leave the workers apart); the consensus distance is every worker's.
    if (w == 0) {
      testing::expect_close(metric(run, "outer_grad_norm"), norms, 0, tag + ": outer_grad_norm");
      testing::expect_close(metric(run, "val_loss"), metric(in_job, "val_loss"), 0,
                            tag + ": val_loss");
    }
    testing::expect_close(metric(run, "consensus_distance"), metric(in_job, "consensus_distance"),
                          0, tag + ": consensus_distance");
    for (std::size_t i = 0; i < syncs.size(); ++i) {
      const std::vector<double> in_job_losses = array_at(in_job, "worker_loss", syncs[i]);
      ASSERT_EQ(in_job_losses.size(), 3u);
      // An overlapped sync is reported, with its step's losses, after the step it overlapped
      // (the last one at the end of training, after the last step).
      const int reported =
          static_cast<int>(syncs[i]) + (overlap && syncs[i] < syncs.back() ? 1 : 0);
      EXPECT_NEAR(testing::logged(run, reported, "\"loss\": "),
                  in_job_losses[static_cast<std::size_t>(w)],
                  1e-4 * in_job_losses[static_cast<std::size_t>(w)])
          << tag << ": slot " << w << ", step " << syncs[i];
      EXPECT_EQ(array_at(run, "members", syncs[i]), (std::vector<double>{0, 1, 2}));
      // A worker that sent nothing (gossip's odd one out) has no inter_worker entry.
      sent[i] += std::max(0.0, number_at(run, "inter_worker", syncs[i]));
    }
  }
  for (std::size_t i = 0; i < syncs.size(); ++i)
    EXPECT_EQ(sent[i], number_at(in_job, "inter_worker", syncs[i])) << tag << ", step " << syncs[i];
}

TEST_F(ElasticRuns, CleanGroupTrainsTheInJobRun) {
  expect_the_in_job_run("clean", " --set diloco.inner_steps=5");
  // Each worker's sync sends a ring all-reduce of its parameters (the tied wte, vocabulary padded
  // to 128 × d_model 32, in a call of its own).
  const std::string run = run_dir("clean_1");
  const auto params = static_cast<std::uint64_t>(number_at(run, "fragment_params", 5));
  const std::uint64_t wte = 128 * 32;
  // Before it, the screen's exchange of outer gradient norms (a double from each worker).
  EXPECT_EQ(number_at(run, "inter_worker", 5),
            static_cast<double>(ring_all_reduce_bytes(4 * wte, 3) +
                                ring_all_reduce_bytes(4 * (params - wte), 3) +
                                screening_bytes_sent(3, 1)));
}

// The other averagings, compression with error feedback, and streaming fragments, between jobs.
TEST_F(ElasticRuns, EveryAveragingCompressionAndStreamingTrainsTheInJobRun) {
  expect_the_in_job_run("butterfly",
                        " --set diloco.inner_steps=5 --set diloco.averaging=butterfly"
                        " --set diloco.compression=int8 --set diloco.error_feedback=true");
  expect_the_in_job_run("gossip",
                        " --set diloco.inner_steps=5 --set diloco.averaging=gossip"
                        " --set diloco.compression=bf16");
  expect_the_in_job_run("moshpit",
                        " --set diloco.inner_steps=4 --set diloco.averaging=moshpit"
                        " --set diloco.compression=fp16 --set diloco.fragments=2");
}

// Each sync's averaging overlapping the next inner step (diloco.overlap), two streaming
// fragments (a sync after every second step), int8 with error feedback.
TEST_F(ElasticRuns, OverlappedSyncsTrainTheInJobRun) {
  expect_the_in_job_run("overlap",
                        " --set diloco.inner_steps=4 --set diloco.overlap=true"
                        " --set diloco.fragments=2 --set diloco.compression=int8"
                        " --set diloco.error_feedback=true");
}

// Workers of different layouts (diloco.layouts any) average the logical model from their rank 0:
// a group of one rank, tp 2 × pp 2 (tensor slices, the tied wte on both pipeline ends) and dp 2
// under ZeRO-3 (the weights sharded, padding) trains the in-job run of one-rank workers within
// 1e-4, sending what one-rank workers send; so does one of dp 2 under ZeRO-1 (the weights
// replicated), tp 2 and one rank with overlapped syncs and streaming fragments.
const std::vector<WorkerLayout> kMixedLayouts{
    {1, ""}, {4, " --set parallel.tp=2 --set parallel.pp=2"}, {2, " --set parallel.zero.stage=3"}};

TEST_F(ElasticRuns, WorkersOfDifferentLayoutsTrainTheInJobRun) {
  expect_the_in_job_run("layouts",
                        " --set diloco.inner_steps=5 --set diloco.compression=int8"
                        " --set diloco.error_feedback=true",
                        kMixedLayouts);
  expect_the_in_job_run(
      "layouts_overlap",
      " --set diloco.inner_steps=4 --set diloco.overlap=true --set diloco.fragments=2",
      {{2, " --set parallel.zero.stage=1"}, {2, " --set parallel.tp=2"}, {1, ""}});
}

// Robust averaging between jobs (docs/ARCHITECTURE.md §2 "Robust averaging"): a rule trains the
// in-job run; a worker whose outer gradient is not finite is left out of every sync, and every
// member's sync line and metrics name its slot.
TEST_F(ElasticRuns, RobustRulesTrainTheInJobRunAndAPoisonedSlotIsLeftOut) {
  expect_the_in_job_run("robust",
                        " --set diloco.inner_steps=5 --set diloco.aggregation=centered_clip"
                        " --set diloco.compression=int8");
  // trimmed_mean is per coordinate, so workers of any layouts train the in-job run with it too.
  expect_the_in_job_run("robust_any",
                        " --set diloco.inner_steps=5 --set diloco.aggregation=trimmed_mean",
                        kMixedLayouts);
  const std::string store = "file://" + dir_->str() + "/store_poisoned";
  std::vector<std::unique_ptr<Background>> jobs;
  for (int w = 0; w < 3; ++w)
    jobs.push_back(std::make_unique<Background>(
        (w == 1 ? "STRATA_TEST_HOOKS=poison_outer=nan " : "") +
            worker_command(store, "poisoned", w, "poisoned_" + std::to_string(w),
                           " --set diloco.inner_steps=5 --set diloco.min_workers=3"),
        dir_->str() + "/poisoned_" + std::to_string(w) + ".log"));
  for (auto& job : jobs) ASSERT_EQ(job->wait(), 0) << job->output();
  for (int w = 0; w < 3; ++w) {
    const std::string run = run_dir("poisoned_" + std::to_string(w));
    for (std::int64_t step : {5, 10, 15, 20})
      EXPECT_NE(outer_line(run, step).find(
                    "\"left_out\": [{\"slot\": 1, \"why\": \"non-finite outer gradient\"}]"),
                std::string::npos)
          << outer_line(run, step);
    EXPECT_NE(jobs[static_cast<std::size_t>(w)]->output().find(
                  "left out slot 1 (non-finite outer gradient)"),
              std::string::npos);
    const std::vector<double> losses = metric(run, "val_loss");
    ASSERT_FALSE(losses.empty());
    EXPECT_TRUE(std::isfinite(losses.back())) << "slot " << w;
  }
}

// A group of different layouts stopped mid-period and resumed (each worker from its checkpoint:
// the outer state scattered into its layout's shares and gathered back) ends bitwise where the
// uninterrupted group ends; a worker resumed with another layout (tp 2 × pp 2 as dp 2 under
// ZeRO-1) takes its outer state through the logical checkpoint and ends within 1e-4. The resumed
// group meets in a fresh store, so that min_workers holds its first sync until all three are back
// (in the old one, the first back would sync without the others, which then join).
TEST_F(ElasticRuns, WorkersOfDifferentLayoutsResume) {
  const std::string settings =
      " --set diloco.inner_steps=5 --set diloco.compression=int8 --set diloco.error_feedback=true"
      " --set diloco.layouts=any --set diloco.min_workers=3 --set checkpoint.every=5";
  const auto group = [&](const std::string& tag, const std::string& more,
                         const std::vector<WorkerLayout>& layouts, bool resume) {
    std::vector<std::unique_ptr<Background>> jobs;
    for (int w = 0; w < 3; ++w)
      jobs.push_back(std::make_unique<Background>(
          worker_command("file://" + dir_->str() + "/store_" + tag + (resume ? "_again" : ""), tag,
                         w, tag + "_" + std::to_string(w),
                         settings + more + (resume ? " --resume" : ""),
                         layouts[static_cast<std::size_t>(w)]),
          dir_->str() + "/" + tag + "_" + std::to_string(w) + (resume ? "_resumed" : "") + ".log"));
    for (auto& job : jobs) ASSERT_EQ(job->wait(), 0) << job->output();
  };
  group("whole", "", kMixedLayouts, false);
  group("resumed", " --set train.stop_after=7", kMixedLayouts, false);
  group("resumed", "", kMixedLayouts, true);
  std::vector<WorkerLayout> relaid = kMixedLayouts;
  relaid[1] = {2, " --set parallel.zero.stage=1"};
  group("relaid", " --set train.stop_after=7", kMixedLayouts, false);
  group("relaid", "", relaid, true);
  for (int w = 0; w < 3; ++w) {
    const std::string slot = "_" + std::to_string(w);
    const auto diff =
        run_command(testing::bin("ckpt") + " diff " + checkpoint(run_dir("whole" + slot)) + " " +
                    checkpoint(run_dir("resumed" + slot)));
    for (const char* tensor : {"model/", "outer/"})
      EXPECT_EQ(diff.output.find(tensor), std::string::npos) << slot << ": " << diff.output;
    testing::expect_close(metric(run_dir("relaid" + slot), "val_loss"),
                          metric(run_dir("whole" + slot), "val_loss"), 0, "relaid" + slot);
    testing::expect_close(metric(run_dir("relaid" + slot), "outer_grad_norm"),
                          metric(run_dir("whole" + slot), "outer_grad_norm"), 0, "relaid" + slot);
  }
}

// Workers of different layouts (diloco.layouts any): slot 2 (dp 2 under ZeRO-3) dies in the
// middle of its rank 0's averaging, which fails on the others' rank 0 alone; their jobs agree, and
// retry without it; a fresh worker of tp 2 then joins and, through its rank 0, ends with the
// group's parameters and outer state bitwise.
TEST_F(ElasticRuns, WorkersOfDifferentLayoutsRetryWithoutTheDeadAndTakeAJoiner) {
  kill_and_join("file://" + dir_->str() + "/store_layouts_kill", "layouts_kill", false,
                Death::averaging, "",
                {{2, " --set parallel.tp=2"},
                 {2, " --set parallel.zero.stage=1"},
                 {2, " --set parallel.zero.stage=3"},
                 {2, " --set parallel.tp=2"}});
  for (const char* slot : {"_0", "_1"}) {
    const std::string line = outer_line(run_dir(std::string("layouts_kill") + slot), 20);
    EXPECT_NE(line.find("\"sync_attempts\": 2"), std::string::npos) << line;
  }
}

// Kills slot 2 in its inner phase: slots 0 and 1 complete the next sync without it (its
// deathrattle written for it) and go on; a fresh worker then takes slot 2, joins at the sync
// after, holds the group's state bitwise and contributes from there.
TEST_F(ElasticRuns, KilledWorkerIsDroppedAndAFreshOneJoinsWithAFileStore) {
  kill_and_join("file://" + dir_->str() + "/store_kill", "kill_file", false);
}

// Slot 2 dies between the two pieces of its averaging at the sync after step 20: the others'
// averaging fails part-way (the first piece averaged, the second lost), they discard it and meet
// again without slot 2 once it is found silent. The group then holds what it holds when slot 2
// dies in its inner phase instead: both runs end bitwise equal, the error-feedback residual that
// the failed averaging had moved included.
TEST_F(ElasticRuns, WorkerKilledWhileAveragingIsRetriedWithoutIt) {
  expect_retry_without_the_dead("",
                                " --set diloco.compression=int8 --set diloco.error_feedback=true");
}

// The same with the averaging overlapping the next inner step: the retry averages θ of step 20
// again, synchronously, and keeps step 21's progress.
TEST_F(ElasticRuns, WorkerKilledWhileAveragingIsRetriedWithoutItUnderOverlap) {
  expect_retry_without_the_dead("overlap_", " --set diloco.overlap=true");
}

// The same with Redis, the killed worker restarted from its checkpoint: the group has moved on,
// so it takes the group's anchor rather than its own.
TEST_F(ElasticRuns, KilledWorkerIsDroppedAndRejoinsOnResumeWithRedis) {
  const RedisServer redis;
  kill_and_join(redis.url(), "kill_redis", true);
}

// A worker started after its group has held its last sync says so and ends, training nothing and
// writing no checkpoint (it once joined past train.steps and wrote its untrained weights as the
// result). One started after every member left mid-run joins at the next sync alone and says that
// it goes on from its own weights.
TEST_F(ElasticRuns, ALateJoinerIsToldTheTruth) {
  const std::string store = "file://" + dir_->str() + "/store_late";
  const std::string group =
      " --set diloco.workers=2 --set diloco.min_workers=1"
      " --set diloco.inner_steps=2 --set train.eval_every=0";
  const auto first = run_command(
      worker_command(store, "finished", 0, "finished_0", group + " --set train.steps=4"));
  ASSERT_EQ(first.status, 0) << first.output;
  const auto late = run_command(
      worker_command(store, "finished", 1, "finished_1", group + " --set train.steps=4"));
  EXPECT_EQ(late.status, 0) << late.output;
  EXPECT_NE(late.output.find("group 'finished' has finished: its last sync was after step 4 and "
                             "train.steps is 4"),
            std::string::npos)
      << late.output;
  EXPECT_EQ(late.output.find("joined the group"), std::string::npos) << late.output;
  EXPECT_EQ(late.output.find("done:"), std::string::npos) << late.output;
  EXPECT_FALSE(std::filesystem::exists(run_dir("finished_1") + "/checkpoints")) << late.output;

  const auto left = run_command(worker_command(
      store, "left", 0, "left_0", group + " --set train.steps=8 --set train.stop_after=4"));
  ASSERT_EQ(left.status, 0) << left.output;
  const auto alone =
      run_command(worker_command(store, "left", 1, "left_1", group + " --set train.steps=8"));
  ASSERT_EQ(alone.status, 0) << alone.output;
  EXPECT_NE(alone.output.find("slot 1 joined the group at step 6"), std::string::npos)
      << alone.output;
  EXPECT_NE(alone.output.find("slot 1: no member of the group held its state (every earlier "
                              "member has left): this worker goes on alone from its own weights, "
                              "at the group's step 6"),
            std::string::npos)
      << alone.output;
}

// The store stops answering (a paused Redis server) in the inner phase: both workers train on,
// saying so, apply the next sync alone when the store stays silent for the timeout, and when it
// answers again meet at the sync after as joiners, where the first slot's state becomes both's.
TEST_F(ElasticRuns, AWorkerThatLosesTheStoreSyncsAloneAndRejoins) {
  RedisServer redis;
  const std::string extra =
      " --set diloco.inner_steps=10 --set train.steps=40 --set train.eval_every=0"
      " --set diloco.timeout=2 --set diloco.min_workers=2 --set diloco.workers=2";
  std::vector<std::unique_ptr<Background>> jobs;
  const auto name = [](int w) { return "outage_" + std::to_string(w); };
  for (int w = 0; w < 2; ++w)
    jobs.push_back(
        std::make_unique<Background>("STRATA_TEST_HOOKS=step_seconds=0.1 " +
                                         worker_command(redis.url(), "outage", w, name(w), extra),
                                     dir_->str() + "/" + name(w) + ".log"));
  const auto wait_for = [&](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  };
  ASSERT_TRUE(wait_for([&] {
    return read_file(run_dir(name(0)) + "/metrics.jsonl").find("{\"step\": 13,") !=
           std::string::npos;
  })) << jobs[0]->output();
  redis.pause();
  const std::string alone = "applies this worker's outer step alone";
  ASSERT_TRUE(wait_for([&] {
    return jobs[0]->output().find(alone) != std::string::npos &&
           jobs[1]->output().find(alone) != std::string::npos;
  })) << jobs[0]->output()
      << jobs[1]->output();
  redis.resume();
  for (auto& job : jobs) ASSERT_EQ(job->wait(), 0) << job->output();
  for (int w = 0; w < 2; ++w) {
    const std::string run = run_dir(name(w));
    EXPECT_NE(jobs[static_cast<std::size_t>(w)]->output().find("training goes on, retrying"),
              std::string::npos);
    EXPECT_EQ(array_at(run, "members", 10), (std::vector<double>{0, 1}));
    EXPECT_EQ(array_at(run, "members", 20), (std::vector<double>{static_cast<double>(w)}));
    EXPECT_EQ(array_at(run, "members", 30), (std::vector<double>{0, 1}));
    EXPECT_EQ(array_at(run, "joining", 30), (std::vector<double>{0, 1}));
    EXPECT_EQ(array_at(run, "joining", 40), (std::vector<double>{}));
  }
  const auto diff = run_command(testing::bin("ckpt") + " diff " + checkpoint(run_dir(name(0))) +
                                " " + checkpoint(run_dir(name(1))));
  for (const char* tensor : {"model/", "outer/"})
    EXPECT_EQ(diff.output.find(tensor), std::string::npos) << diff.output;
}

// Bad settings, an unreachable store and a group whose settings differ: one `error:` line each.
// Authenticated membership (docs/ARCHITECTURE.md §2 "Authenticated membership"): a group with a
// secret trains the in-job run exactly, although records a stranger planted in its store before
// it started (valid text, no signature: a claim of slot 2, a deathrattle for slot 1, a decision
// for its first sync) are there; meanwhile a worker with another secret and one with none are
// refused with one error line each and never join.
TEST_F(ElasticRuns, AGroupWithASecretIgnoresForgedRecordsAndRefusesStrangers) {
  const std::string ours = testing::write_secret_file(dir_->str() + "/group.secret",
                                                      "a shared secret of the group, 32 bytes");
  const std::string theirs = testing::write_secret_file(dir_->str() + "/stranger.secret",
                                                        "a stranger's guess at the secret");
  const std::string in_job =
      testing::train_ranks(*dir_, 3, Layout{}, "secret_in_job",
                           " --set diloco.enabled=true --set diloco.workers=3"
                           " --set diloco.inner_steps=5");
  const std::string store_dir = dir_->str() + "/store_secret";
  const std::string store = "file://" + store_dir;
  {
    const auto forger = open_rendezvous_store(store);
    forger->set("secret/claim/2/0", store_bytes("a stranger's token"));
    forger->set("secret/dead/1/0", store_bytes("missed heartbeats"));
    forger->set("secret/members/5", store_bytes("step 5\ngroup_step 5\nmembers 0:0:0\nlost\n"));
  }
  const std::string settings = " --set diloco.inner_steps=5 --set diloco.min_workers=3";
  std::vector<std::unique_ptr<Background>> jobs;
  for (int w = 0; w < 3; ++w)
    jobs.push_back(std::make_unique<Background>(
        worker_command(store, "secret", w, "secret_" + std::to_string(w),
                       settings + " --set diloco.secret_file=" + ours),
        dir_->str() + "/secret_" + std::to_string(w) + ".log"));
  // Once the group's settings are written, strangers try to join.
  for (int i = 0; i < 600 && !std::filesystem::exists(store_dir + "/secret/settings"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  testing::expect_one_error_line(worker_command(store, "secret", -1, "stranger",
                                                settings + " --set diloco.secret_file=" + theirs),
                                 "its settings are not signed with this member's secret");
  testing::expect_one_error_line(worker_command(store, "secret", -1, "no_secret", settings),
                                 "the group is authenticated");
  for (auto& job : jobs) ASSERT_EQ(job->wait(), 0) << job->output();
  bool reported = false;
  for (int w = 0; w < 3; ++w) {
    const std::string run = run_dir("secret_" + std::to_string(w));
    EXPECT_EQ(outer_steps(run), outer_steps(in_job));
    for (std::int64_t step : outer_steps(in_job))
      EXPECT_EQ(array_at(run, "members", step), (std::vector<double>{0, 1, 2})) << step;
    const std::string output = jobs[static_cast<std::size_t>(w)]->output();
    EXPECT_NE(output.find("' is authenticated: its store records are signed"), std::string::npos);
    EXPECT_EQ(output.find("a shared secret of the group"), std::string::npos);
    reported = reported || output.find("ignored: it is not signed") != std::string::npos;
  }
  EXPECT_TRUE(reported) << "no worker reported a forged record";
  testing::expect_close(metric(run_dir("secret_0"), "val_loss"), metric(in_job, "val_loss"), 0,
                        "val_loss");
  testing::expect_close(metric(run_dir("secret_0"), "outer_grad_norm"),
                        metric(in_job, "outer_grad_norm"), 0, "outer_grad_norm");
}

TEST_F(ElasticRuns, BadJoinsAreOneErrorLine) {
  const auto expect_error = testing::expect_one_error_line;
  expect_error(worker_command("ftp://nowhere", "bad", 0, "bad_url", ""), "diloco.join");
  expect_error(worker_command("redis://127.0.0.1:1", "bad", 0, "no_store", ""),
               "redis://127.0.0.1:1");
  expect_error(worker_command("file://" + dir_->str() + "/store_bad", "bad", 5, "bad_slot", ""),
               "diloco.slot");
  // The group's first worker sets its settings; a second with another model is refused.
  const std::string store = "file://" + dir_->str() + "/store_settings";
  const auto first =
      run_command(worker_command(store, "settings", 0, "settings_first", " --set train.steps=2"));
  ASSERT_EQ(first.status, 0) << first.output;
  expect_error(worker_command(store, "settings", 1, "settings_second",
                              " --set train.steps=2 --set model.n_layer=2"),
               "model.n_layer is 2 here but 4 in the group");
  // A worker of its own layout cannot join a group whose workers share theirs.
  expect_error(worker_command(store, "settings", 1, "settings_any",
                              " --set train.steps=2 --set diloco.layouts=any"),
               "diloco.layouts is any here but same in the group");
  // In a group of any layouts, the model is still the group's.
  const std::string any_store = "file://" + dir_->str() + "/store_settings_any";
  const std::string any = " --set train.steps=2 --set diloco.layouts=any";
  const auto any_first = run_command(worker_command(any_store, "settings", 0, "any_first", any));
  ASSERT_EQ(any_first.status, 0) << any_first.output;
  expect_error(worker_command(any_store, "settings", 1, "any_second",
                              any + " --set model.n_layer=2", {2, " --set parallel.tp=2"}),
               "model.n_layer is 2 here but 4 in the group");
}

void ElasticRuns::expect_retry_without_the_dead(const std::string& tag, const std::string& more) {
  const std::string inner = tag + "inner", averaging = tag + "averaging";
  kill_and_join("file://" + dir_->str() + "/store_" + inner, inner, false, Death::inner_phase,
                more);
  kill_and_join("file://" + dir_->str() + "/store_" + averaging, averaging, false, Death::averaging,
                more);
  for (const char* slot : {"_0", "_1"}) {
    const std::string line = outer_line(run_dir(averaging + slot), 20);
    EXPECT_NE(line.find("\"sync_attempts\": 2"), std::string::npos) << line;
  }
  for (const char* slot : {"_0", "_1", "_3"}) {
    const auto diff =
        run_command(testing::bin("ckpt") + " diff " + checkpoint(run_dir(inner + slot)) + " " +
                    checkpoint(run_dir(averaging + slot)));
    for (const char* tensor : {"model/", "outer/"})
      EXPECT_EQ(diff.output.find(tensor), std::string::npos) << slot << ": " << diff.output;
  }
}

void ElasticRuns::kill_and_join(const std::string& store, const std::string& tag, bool resume,
                                Death death, const std::string& more_settings,
                                const std::vector<WorkerLayout>& layouts) {
  // Steps of at least 0.15 s: the victim is surely in its inner phase when killed at step 13
  // (syncs after steps 10, 20, 30, 40), whatever else runs on the machine, and the fresh worker,
  // started once the survivors have synced after step 20, has about 1.4 s to start and take its
  // slot before they meet for the sync after step 30 (under overlap a step less).
  const std::string extra =
      " --set diloco.inner_steps=10 --set train.steps=40 --set train.eval_every=0"
      " --set diloco.timeout=3 --set diloco.min_workers=3 --set checkpoint.every=10" +
      more_settings + (layouts.empty() ? "" : " --set diloco.layouts=any");
  // A fresh worker of several ranks starts more slowly: steps of 0.3 s give it about 2.8 s.
  const std::string step_seconds = layouts.empty() ? "step_seconds=0.15" : "step_seconds=0.3";
  const auto name = [&](int i) { return tag + "_" + std::to_string(i); };
  const auto start = [&](int slot, int i, const std::string& more = "") {
    const std::string kill =
        death == Death::averaging && i == 2 && more.empty() ? " kill_in_averaging=20" : "";
    return std::make_unique<Background>(
        "STRATA_TEST_HOOKS='" + step_seconds + kill + "' " +
            worker_command(store, tag, slot, name(i), extra + more,
                           layouts.empty() ? WorkerLayout{} : layouts[static_cast<std::size_t>(i)]),
        dir_->str() + "/" + name(i) + (more.empty() ? "" : "_again") + ".log");
  };
  std::vector<std::unique_ptr<Background>> jobs;
  for (int w = 0; w < 3; ++w) jobs.push_back(start(w, w));
  const auto wait_for = [&](const std::string& run, const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (read_file(run + "/metrics.jsonl").find(needle) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  };
  if (death == Death::inner_phase) {
    ASSERT_TRUE(wait_for(run_dir(name(2)), "{\"step\": 13,")) << jobs[2]->output();
    const std::string victim = "^" + testing::bin("train") + " .*run.name=" + name(2) + " ";
    ASSERT_EQ(run_command("pkill -KILL -f '" + victim + "'").status, 0);
  }
  // Killing itself, the victim is seen dead when its mpirun ends (a little after the kill).
  auto killed = std::chrono::steady_clock::now();
  EXPECT_NE(jobs[2]->wait(), 0);
  if (death == Death::averaging) killed = std::chrono::steady_clock::now();
  // The survivors' next sync completes without it.
  ASSERT_TRUE(wait_for(run_dir(name(0)), "{\"step\": 20, \"outer_step\"")) << jobs[0]->output();
  const double recovery =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("from the kill to the survivors' next completed sync: %.1f s (timeout 3 s)\n",
              recovery);
  // A fresh worker takes the first free slot: 2.
  if (resume)
    jobs.push_back(start(-1, 2, " --resume"));
  else
    jobs.push_back(start(-1, 3));
  for (int i : {0, 1, 3})
    ASSERT_EQ(jobs[static_cast<std::size_t>(i)]->wait(), 0)
        << jobs[static_cast<std::size_t>(i)]->output();
  for (int i : {0, 1}) {
    const std::string run = run_dir(name(i));
    EXPECT_EQ(array_at(run, "members", 10), (std::vector<double>{0, 1, 2}));
    EXPECT_EQ(array_at(run, "members", 20), (std::vector<double>{0, 1}));
    EXPECT_EQ(array_at(run, "dropped_workers", 20), (std::vector<double>{2}));
    EXPECT_EQ(array_at(run, "members", 30), (std::vector<double>{0, 1, 2}));
    EXPECT_EQ(array_at(run, "joining", 30), (std::vector<double>{2}));
    EXPECT_EQ(array_at(run, "joining", 40), (std::vector<double>{}));
    if (death == Death::inner_phase) {
      // The wait for the dead slot (until its timeout) is the sync's, in its own line, and not
      // step 20's time.
      const double waited = number_at(run, "outer_wait_s", 20);
      EXPECT_GT(waited, 1.0) << outer_line(run, 20);
      EXPECT_LT(testing::logged(run, 20, "\"step_ms\": "), 1e3 * waited) << outer_line(run, 20);
    }
  }
  const std::string joined = run_dir(name(resume ? 2 : 3));
  EXPECT_NE(jobs[3]->output().find("slot 2 joined the group at step 30"), std::string::npos)
      << jobs[3]->output();
  EXPECT_EQ(array_at(joined, "joining", 30), (std::vector<double>{2}));
  EXPECT_EQ(array_at(joined, "members", 40), (std::vector<double>{0, 1, 2}));
  // It trained steps 31 to 40 only (after the resumed run's 1 to 10), and ends with the group's
  // parameters and outer state, bit for bit (the inner optimizer's moments and an error-feedback
  // residual are its own).
  std::vector<double> steps;
  for (const double step : metric(joined, "step"))
    if (step > 10 || !resume) steps.push_back(step);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 30);  // the sync it joined at
  // Under overlap the last checkpoint holds each worker's own θ of step 40, whose sync is still
  // pending there (a resume prepares it again), so only the outer state is the group's.
  const bool overlap = more_settings.find("diloco.overlap=true") != std::string::npos;
  const auto diff = run_command(testing::bin("ckpt") + " diff " + checkpoint(run_dir(name(0))) +
                                " " + checkpoint(joined));
  for (const char* tensor : {"model/", "outer/anchor", "outer/momentum"}) {
    if (overlap && std::string(tensor) == "model/") continue;
    EXPECT_EQ(diff.output.find(tensor), std::string::npos) << diff.output;
  }
}

}  // namespace
}  // namespace strata
