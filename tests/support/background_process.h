// A command the test runs in the background (a worker job, a swarm peer, a server), its output
// in a file; killed with its whole process group when the object dies.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/support/test_support.h"

namespace strata::testing {

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
  // The process sh ran (the command itself when it starts with `exec`).
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  std::string log_;
};

}  // namespace strata::testing
