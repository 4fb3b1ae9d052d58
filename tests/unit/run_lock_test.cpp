// The run directory's lease (train/run_lock.h): taken and released, refused while its holder
// lives (the same host's live pid, another host's fresh heartbeat), taken over from a dead one (a
// pid gone on this host, a heartbeat older than the timeout anywhere), and refreshed while held.
#include "train/run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::error_of;
using testing::TempDir;

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void write_lock(const std::string& run_dir, const std::string& host, long pid, double heartbeat) {
  std::filesystem::create_directories(run_dir);
  std::ofstream(run_dir + "/run.lock")
      << "host " << host << "\npid " << pid << "\nheartbeat " << std::fixed << heartbeat << "\n";
}

// A pid that was this host's a moment ago and is gone now.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return static_cast<long>(child);
}

TEST(RunLock, TakesAFreeLockNamingItselfAndRemovesItAtTheEnd) {
  const TempDir dir("run_lock_free");
  const std::string run = dir / "run";
  {
    const RunLock lock(run);
    const std::optional<RunLockHolder> holder = read_run_lock(run + "/run.lock");
    ASSERT_TRUE(holder);
    EXPECT_EQ(holder->host, this_host());
    EXPECT_EQ(holder->pid, static_cast<long>(::getpid()));
    EXPECT_NEAR(holder->heartbeat, now_seconds(), 5);
    EXPECT_TRUE(lock.takeover().empty());
  }
  EXPECT_FALSE(std::filesystem::exists(run + "/run.lock"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(run),
                          std::filesystem::directory_iterator()),
            0);  // no temporary file left either
}

TEST(RunLock, ALiveHolderIsNamedAndItsLockKept) {
  const TempDir dir("run_lock_live");
  const std::string run = dir / "run";
  const RunLock first(run);
  const std::string error = error_of([&] { RunLock second(run); });
  EXPECT_NE(error.find("is in use by another job (host " + this_host() + ", pid " +
                       std::to_string(::getpid()) + ", heartbeat "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("use another run.name"), std::string::npos) << error;
  // Another host's lock with a fresh heartbeat: its pid cannot be checked from here.
  const std::string other = dir / "other";
  write_lock(other, "elsewhere", 1, now_seconds() - 10);
  EXPECT_NE(error_of([&] { RunLock lock(other); }).find("host elsewhere, pid 1"),
            std::string::npos);
  EXPECT_EQ(read_run_lock(other + "/run.lock")->host, "elsewhere");
}

TEST(RunLock, ADeadHolderIsTakenOverSayingWhy) {
  const TempDir dir("run_lock_dead");
  const std::string gone = dir / "gone";
  write_lock(gone, this_host(), dead_pid(), now_seconds());
  {
    const RunLock lock(gone);
    EXPECT_NE(lock.takeover().find("its pid is gone"), std::string::npos) << lock.takeover();
    EXPECT_EQ(read_run_lock(gone + "/run.lock")->pid, static_cast<long>(::getpid()));
  }
  // A zombie (ended, not yet reaped by its parent) is gone too.
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  siginfo_t ended{};
  ::waitid(P_PID, static_cast<id_t>(zombie), &ended, WEXITED | WNOWAIT);  // ended, not reaped
  const std::string unreaped = dir / "unreaped";
  write_lock(unreaped, this_host(), static_cast<long>(zombie), now_seconds());
  {
    const RunLock lock(unreaped);
    EXPECT_NE(lock.takeover().find("its pid is gone"), std::string::npos) << lock.takeover();
  }
  ::waitpid(zombie, nullptr, 0);
  const std::string stale = dir / "stale";
  write_lock(stale, "elsewhere", 1, now_seconds() - 2 * kRunLockTimeoutSeconds);
  const RunLock lock(stale);
  EXPECT_NE(lock.takeover().find("from host elsewhere, pid 1"), std::string::npos)
      << lock.takeover();
  EXPECT_NE(lock.takeover().find("over the 60 s timeout"), std::string::npos) << lock.takeover();
}

TEST(RunLock, TheHolderRefreshesItsHeartbeat) {
  const TempDir dir("run_lock_beat");
  const std::string run = dir / "run";
  const RunLock lock(run, 0.6);  // a beat every 0.1 s
  const double first = read_run_lock(run + "/run.lock")->heartbeat;
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_GT(read_run_lock(run + "/run.lock")->heartbeat, first + 0.1);
}

}  // namespace
}  // namespace strata
