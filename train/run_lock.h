// The run directory's lock: one job at a time writes a run (its checkpoints, metrics, config).
//
// A lease rather than flock(2), which is unreliable over shared network file systems, and whose
// holder's pid another host cannot check. The lock is the file <run dir>/run.lock:
//   host <hostname>
//   pid <pid>
//   heartbeat <seconds since the epoch>
//   parent <pid of mpirun>            (under mpirun only)
// A job's rank 0 makes it atomically (written under a temporary name, then link(2)ed into place,
// which fails where a lock already is) and refreshes its heartbeat from a thread of its own every
// timeout / 6 (rewritten under a temporary name and renamed over itself). A second job meets the
// lock and, while its holder lives, stops with an error naming host, pid and the heartbeat's age.
// A holder is dead when its heartbeat is older than the timeout (kRunLockTimeoutSeconds, 60 s), or,
// on this host, when its pid is gone (or a zombie), or when it ran under an mpirun that has ended
// (mpirun can end while a rank still waits in a collective for a dead peer; such an orphan ends
// itself as soon as its heartbeat thread sees it, within 0.5 s): then the lock is taken over
// (renamed aside, one of several racing takers winning, and a new one linked in) and the job says
// so. The holder removes the lock when it ends; a killed job leaves it, dead, for the next.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace strata {

inline constexpr double kRunLockTimeoutSeconds = 60;

// What a lock file says.
struct RunLockHolder {
  std::string host;
  long pid = 0;
  double heartbeat = 0;  // seconds since the epoch
  long parent = 0;       // its mpirun's pid; 0 when it did not run under mpirun
};

// The holder named by the lock file at `path`; nullopt when there is none (or it is unreadable,
// e.g. half-written by hand: such a lock counts as dead).
std::optional<RunLockHolder> read_run_lock(const std::string& path);

class RunLock {
 public:
  // Takes the lock of `run_dir` (creating the directory) or throws Error naming the holder.
  explicit RunLock(const std::string& run_dir, double timeout_seconds = kRunLockTimeoutSeconds);
  // Stops the heartbeat and removes the lock while it is still this process's.
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }
  // "" or the line that says whose dead lock this one took over, and why it was dead.
  const std::string& takeover() const { return takeover_; }

 private:
  void write_heartbeat(const std::string& target) const;
  bool still_mine() const;
  void beat();

  std::string path_, host_;
  long pid_ = 0, parent_ = 0;
  double timeout_seconds_;
  std::string takeover_;
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

}  // namespace strata
