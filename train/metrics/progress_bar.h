// Live status lines on a terminal: `train`'s progress bar under its log lines, and the line that
// `tokenize` redraws while it encodes (LiveLine, shared by both).
//
// The bar, on rank 0 when stdout is a terminal:
//   [########............] 120/400 steps 30% | 2.1 s/step | ETA 9m48s
// is redrawn in place ("\r") at the start of every step and erased before the step's log lines,
// which then take its row; the next step draws it again below them. Nothing is drawn when stdout
// is a file or a pipe, so logs and tests hold only the log lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata {

// One line redrawn in place at the bottom of a terminal `stream`: draw() replaces its text
// (carriage return, the text, then erase-to-end-of-line, so a shorter text leaves no tail),
// erase() clears the row so that ordinary output can take it, finish() moves below the last text
// drawn so that it stays on the screen.
class LiveLine {
 public:
  explicit LiveLine(std::FILE* stream) : stream_(stream) {}
  void draw(const std::string& text);
  void erase();
  void finish();

 private:
  std::FILE* stream_;
  bool drawn_ = false;  // the row holds a drawn text
};

// Whether the process's stdout is a terminal a person watches. Open MPI gives every rank a
// pseudo-terminal for stdout whatever mpirun's own output is (a file, a pipe), so under mpirun
// this asks about mpirun's (the parent process's) stdout instead, through /proc.
bool stdout_is_terminal();

// "45s", "9m48s", "3h07m": a duration to the precision an ETA deserves.
std::string format_duration(double seconds);

// The bar's text after `step` of `total` steps (steps before `step` done). With a known
// seconds_per_step (> 0) it adds the pace and the time left for the remaining steps, e.g.
// "[########............] 120/400 steps 30% | 2.1 s/step | ETA 9m48s"; without, only the bar,
// counts and percentage.
std::string progress_bar_text(std::int64_t step, std::int64_t total, double seconds_per_step);

// `train`'s bar: shown when `enabled` (the logging rank) and stdout_is_terminal(); otherwise
// every call does nothing. The pace is the wall time since construction over the steps done since,
// so evaluations and checkpoints count in the ETA as they will in the time left.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::int64_t first_step, std::int64_t total_steps);
  ~ProgressBar() { erase(); }  // an error message then starts on a clean row
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws the bar at `step` steps done.
  void draw(std::int64_t step);
  // Clears it: call before printing log lines.
  void erase() { line_.erase(); }

 private:
  bool shown_;
  std::int64_t first_step_;
  std::int64_t total_steps_;
  std::chrono::steady_clock::time_point start_;
  LiveLine line_;
};

}  // namespace strata
