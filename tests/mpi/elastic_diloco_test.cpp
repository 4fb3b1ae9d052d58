// Elastic DiLoCo (train/diloco/elastic_worker.h) end to end: worker jobs, each its own mpirun,
// meet in a rendezvous store. A clean group of k jobs trains the in-job run of k workers; a worker
// killed in its inner phase is dropped and the others go on without it; a fresh worker joins,
// takes the group's state bitwise and contributes from the next sync; bad settings and an
// unreachable store are one `error:` line. With a file store, then with a Redis server the test
// starts on a loopback port.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "parallel/comm/communicator.h"
#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::Layout;
using testing::metric;
using testing::read_file;
using testing::run_command;
using testing::TempDir;

// A command running in the background, its output in a file.
class Background {
 public:
  Background(const std::string& command, const std::string& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);  // its own process group: killed whole
      ::execl("/bin/sh", "sh", "-c", (command + " >" + log + " 2>&1").c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The exit status (-1: killed by a signal).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    done_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string output() const { return read_file(log_); }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  std::string log_;
};

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
    server_ = std::make_unique<Background>("redis-server --port " + std::to_string(port_) +
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

 private:
  int port_ = 0;
  std::unique_ptr<Background> server_;
};

class ElasticRuns : public testing::LayoutSuite<ElasticRuns> {
 public:
  static constexpr const char* kTag = "elastic";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }

 protected:
  static void kill_and_join(const std::string& store, const std::string& tag);

  // `train` on one rank as slot `slot` (-1: the first free) of `group` in `store`.
  static std::string worker_command(const std::string& store, const std::string& group, int slot,
                                    const std::string& name, const std::string& extra) {
    return testing::mpirun(1) + testing::bin("train") + " " + dir_->str() + "/config.yaml" +
           " --set run.name=" + name + " --set diloco.enabled=true --set diloco.workers=3" +
           " --set diloco.join=" + store + " --set diloco.group=" + group +
           " --set diloco.slot=" + std::to_string(slot) + " --set diloco.interface=lo" + extra;
  }
  static std::string run_dir(const std::string& name) { return dir_->str() + "/runs/" + name; }

  // The outer_step line of `step` in the run's metrics ("" when there is none).
  static std::string outer_line(const std::string& run, std::int64_t step) {
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.find("\"outer_step\"") != std::string::npos &&
          line.starts_with("{\"step\": " + std::to_string(step) + ","))
        return line;
    return "";
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
// outer step's norm, each worker's loss at every sync, and the final val_loss within 1e-4.
TEST_F(ElasticRuns, CleanGroupTrainsTheInJobRun) {
  const std::string in_job = testing::train_diloco_workers(*dir_, Layout{}, "in_job", 3);
  const std::string store = "file://" + dir_->str() + "/store_clean";
  std::vector<std::unique_ptr<Background>> jobs;
  for (int w = 0; w < 3; ++w)
    jobs.push_back(std::make_unique<Background>(
        worker_command(store, "clean", w, "clean_" + std::to_string(w),
                       " --set diloco.inner_steps=5 --set diloco.min_workers=3"),
        dir_->str() + "/clean_" + std::to_string(w) + ".log"));
  for (auto& job : jobs) ASSERT_EQ(job->wait(), 0) << job->output();
  const std::vector<double> norms = metric(in_job, "outer_grad_norm");
  ASSERT_EQ(norms.size(), 4u);  // syncs after steps 5, 10, 15 and 20
  for (int w = 0; w < 3; ++w) {
    const std::string run = run_dir("clean_" + std::to_string(w));
    testing::expect_close(metric(run, "outer_grad_norm"), norms, 0,
                          "outer_grad_norm of slot " + std::to_string(w));
    testing::expect_close(metric(run, "val_loss"), metric(in_job, "val_loss"), 0, "val_loss");
    for (int step = 5; step <= 20; step += 5) {
      const std::vector<double> in_job_losses = array_at(in_job, "worker_loss", step);
      ASSERT_EQ(in_job_losses.size(), 3u);
      EXPECT_NEAR(testing::logged(run, step, "\"loss\": "), in_job_losses[w],
                  1e-4 * in_job_losses[w])
          << "slot " << w << ", step " << step;
      EXPECT_EQ(array_at(run, "members", step), (std::vector<double>{0, 1, 2}));
      // Each worker's sync sends a ring all-reduce of its parameters across the worker boundary
      // (the tied wte, vocabulary padded to 128 × d_model 32, in a call of its own), a third of
      // what the in-job run's three workers send together.
      const auto params = static_cast<std::uint64_t>(number_at(run, "fragment_params", step));
      const std::uint64_t wte = 128 * 32;
      const double sent = number_at(run, "inter_worker", step);
      EXPECT_EQ(sent, static_cast<double>(ring_all_reduce_bytes(4 * wte, 3) +
                                          ring_all_reduce_bytes(4 * (params - wte), 3)));
      EXPECT_EQ(3 * sent, number_at(in_job, "inter_worker", step));
    }
  }
}

// Kills slot 2 in its inner phase: slots 0 and 1 complete the next sync without it (its
// deathrattle written for it) and go on; a fresh worker then takes slot 2, joins at the sync
// after, holds the group's state bitwise and contributes from there.
TEST_F(ElasticRuns, KilledWorkerIsDroppedAndAFreshOneJoinsWithAFileStore) {
  kill_and_join("file://" + dir_->str() + "/store_kill", "kill_file");
}

TEST_F(ElasticRuns, KilledWorkerIsDroppedAndAFreshOneJoinsWithRedis) {
  const RedisServer redis;
  kill_and_join(redis.url(), "kill_redis");
}

// Bad settings, an unreachable store and a group whose settings differ: one `error:` line each.
TEST_F(ElasticRuns, BadJoinsAreOneErrorLine) {
  const auto expect_error = [](const std::string& command, const std::string& needle) {
    const auto result = run_command(command);
    EXPECT_NE(result.status, 0) << command << "\n" << result.output;
    std::size_t error_lines = 0;
    std::istringstream lines(result.output);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with("error: ")) ++error_lines;
    EXPECT_EQ(error_lines, 1u) << result.output;
    EXPECT_NE(result.output.find(needle), std::string::npos) << result.output;
  };
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
}

void ElasticRuns::kill_and_join(const std::string& store, const std::string& tag) {
  // Steps of at least 0.1 s: the victim is surely in its inner phase when killed at step 13
  // (syncs after steps 10, 20, 30, 40), whatever else runs on the machine.
  const std::string extra =
      " --set diloco.inner_steps=10 --set train.steps=40 --set train.eval_every=0"
      " --set diloco.timeout=3 --set diloco.min_workers=3";
  const std::string env = "STRATA_TEST_STEP_SECONDS=0.1 ";
  const auto name = [&](int i) { return tag + "_" + std::to_string(i); };
  const auto start = [&](int slot, int i) {
    return std::make_unique<Background>(env + worker_command(store, tag, slot, name(i), extra),
                                        dir_->str() + "/" + name(i) + ".log");
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
  ASSERT_TRUE(wait_for(run_dir(name(2)), "{\"step\": 13,")) << jobs[2]->output();
  const std::string victim = "^" + testing::bin("train") + " .*run.name=" + name(2) + " ";
  ASSERT_EQ(run_command("pkill -KILL -f '" + victim + "'").status, 0);
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_NE(jobs[2]->wait(), 0);
  // The survivors' next sync completes without it.
  ASSERT_TRUE(wait_for(run_dir(name(0)), "{\"step\": 20, \"outer_step\"")) << jobs[0]->output();
  const double recovery =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("from the kill to the survivors' next completed sync: %.1f s (timeout 3 s)\n",
              recovery);
  // A fresh worker takes the first free slot: 2.
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
  }
  const std::string joined = run_dir(name(3));
  EXPECT_NE(jobs[3]->output().find("slot 2 joined the group at step 30"), std::string::npos)
      << jobs[3]->output();
  EXPECT_EQ(array_at(joined, "joining", 30), (std::vector<double>{2}));
  EXPECT_EQ(array_at(joined, "members", 40), (std::vector<double>{0, 1, 2}));
  // It trained steps 31 to 40 only, and ends with the group's parameters and outer state, bit
  // for bit (the inner optimizer's moments are each worker's own).
  const std::vector<double> steps = metric(joined, "step");
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 30);  // the sync it joined at
  const auto checkpoint = [](const std::string& run) {
    for (const auto& entry : std::filesystem::directory_iterator(run + "/checkpoints"))
      return entry.path().string();
    return std::string();
  };
  const auto diff = run_command(testing::bin("ckpt") + " diff " + checkpoint(run_dir(name(0))) +
                                " " + checkpoint(joined));
  for (const char* tensor : {"model/", "outer/"})
    EXPECT_EQ(diff.output.find(tensor), std::string::npos) << diff.output;
}

}  // namespace
}  // namespace strata
