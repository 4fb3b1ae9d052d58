// RunLock (run_lock.h): a run directory's lease, taken, refreshed, taken over and released.
#include "train/run_lock.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "model/core/error.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Process `pid` of this host as /proc/<pid>/stat tells it: its state letter ('Z': a zombie, ended
// but not yet reaped) and its parent's pid; state '\0' when there is no such process.
struct ProcessStat {
  char state = '\0';
  long parent = 0;
};
ProcessStat process_stat(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t name_end = text.rfind(')');  // the fields follow the parenthesised name
  ProcessStat result;
  if (name_end == std::string::npos) return result;
  std::istringstream fields(text.substr(name_end + 1));
  fields >> result.state >> result.parent;
  return result;
}

// Whether process `pid` of this host has ended: kill(pid, 0) fails with ESRCH (EPERM: a process
// of another user lives), or it is a zombie.
bool process_gone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  return process_stat(pid).state == 'Z';
}

// Why the holder is dead ("" while it lives): a heartbeat older than the timeout, or on this host
// a pid that is gone, or an mpirun that has ended (the holder then an orphan, its parent another).
std::string death_of(const RunLockHolder& holder, const std::string& host, double timeout) {
  const double age = now_seconds() - holder.heartbeat;
  char text[96];
  if (age > timeout) {
    std::snprintf(text, sizeof text, "its heartbeat is %.0f s old, over the %.0f s timeout", age,
                  timeout);
    return text;
  }
  if (holder.host != host || holder.pid <= 0) return "";
  if (process_gone(holder.pid)) return "its pid is gone";
  if (holder.parent > 0 && process_stat(holder.pid).parent != holder.parent)
    return "its mpirun (pid " + std::to_string(holder.parent) + ") has ended";
  return "";
}

std::string describe(const RunLockHolder& holder) {
  char text[64];
  std::snprintf(text, sizeof text, "%.0f s ago", now_seconds() - holder.heartbeat);
  return "host " + holder.host + ", pid " + std::to_string(holder.pid) + ", heartbeat " + text;
}

}  // namespace

std::optional<RunLockHolder> read_run_lock(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  RunLockHolder holder;
  std::string key;
  bool host = false, pid = false, heartbeat = false;
  while (in >> key) {
    if (key == "host") host = static_cast<bool>(in >> holder.host);
    if (key == "pid") pid = static_cast<bool>(in >> holder.pid);
    if (key == "heartbeat") heartbeat = static_cast<bool>(in >> holder.heartbeat);
    if (key == "parent") in >> holder.parent;
  }
  if (!host || !pid || !heartbeat) return RunLockHolder{};  // unreadable: a heartbeat of 1970
  return holder;
}

RunLock::RunLock(const std::string& run_dir, double timeout_seconds)
    : path_((fs::path(run_dir) / "run.lock").string()),
      host_(host_name()),
      pid_(static_cast<long>(::getpid())),
      // Under mpirun (which sets OMPI_COMM_WORLD_SIZE) the job lives as long as its launcher.
      parent_(std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ? static_cast<long>(::getppid()) : 0),
      timeout_seconds_(timeout_seconds) {
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error) fail("cannot create run directory '", run_dir, "': ", error.message());
  const std::string mine = path_ + "." + host_ + "." + std::to_string(pid_);
  write_heartbeat(mine);
  // Two tries: the first meets a lock that is dead, takes it aside, and links its own.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::link(mine.c_str(), path_.c_str()) == 0) {
      fs::remove(mine, error);
      heartbeat_ = std::thread([this] { beat(); });
      return;
    }
    if (errno != EEXIST) {
      fs::remove(mine, error);
      fail("cannot make the run lock '", path_, "': ", std::strerror(errno));
    }
    const std::optional<RunLockHolder> holder = read_run_lock(path_);
    if (!holder) continue;  // released between the link and the read
    const std::string death = death_of(*holder, host_, timeout_seconds_);
    if (death.empty()) {
      fs::remove(mine, error);
      fail("run directory '", run_dir, "' is in use by another job (", describe(*holder),
           "; its lock ", path_, "); wait for it to end, or use another run.name");
    }
    // Renamed aside: of several jobs taking over at once, one rename succeeds.
    const std::string aside = mine + ".dead";
    if (::rename(path_.c_str(), aside.c_str()) == 0) {
      fs::remove(aside, error);
      takeover_ = "took over the lock of run directory '" + run_dir + "' from " +
                  describe(*holder) + ": " + death;
    }
  }
  fs::remove(mine, error);
  fail("run directory '", run_dir, "' is in use by another job that took its lock just now (",
       path_, ")");
}

RunLock::~RunLock() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  std::error_code ignored;
  if (still_mine()) fs::remove(path_, ignored);
}

void RunLock::write_heartbeat(const std::string& target) const {
  std::ofstream out(target, std::ios::trunc);
  char heartbeat[32];
  std::snprintf(heartbeat, sizeof heartbeat, "%.3f", now_seconds());
  out << "host " << host_ << "\npid " << pid_ << "\nheartbeat " << heartbeat << "\n";
  if (parent_ > 0) out << "parent " << parent_ << "\n";
  if (!out.flush()) fail("cannot write the run lock '", target, "'");
}

bool RunLock::still_mine() const {
  const std::optional<RunLockHolder> holder = read_run_lock(path_);
  return holder && holder->host == host_ && holder->pid == pid_;
}

// Every timeout / 6, while the lock is still this process's: a new heartbeat, renamed over the
// lock (a reader sees the old file or the new one, never half of one). Every 0.5 s: whether the
// mpirun this process ran under has ended, which leaves it an orphan of a dead job: it ends at
// once, as a taker of its lock counts it dead.
void RunLock::beat() {
  const double period = timeout_seconds_ / 6;
  const auto wake = std::chrono::duration<double>(std::min(period, 0.5));
  const std::string fresh = path_ + "." + host_ + "." + std::to_string(pid_) + ".beat";
  double last_beat = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_signal_.wait_for(lock, wake, [this] { return stopping_; })) {
    if (parent_ > 0 && static_cast<long>(::getppid()) != parent_) {
      std::fprintf(stderr, "error: mpirun (pid %ld) has ended; this rank ends too\n", parent_);
      std::_Exit(1);
    }
    if (now_seconds() - last_beat < period) continue;
    last_beat = now_seconds();
    if (!still_mine()) return;  // taken over by a job that found this one silent
    try {
      write_heartbeat(fresh);
      std::error_code ignored;
      fs::rename(fresh, path_, ignored);
    } catch (const Error&) {
      // A full disk: the next beat tries again; a lock left stale is taken over, never wrong.
    }
  }
}

}  // namespace strata
