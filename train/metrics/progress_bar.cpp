#include "train/metrics/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace strata {

namespace {

constexpr int kBarCells = 20;

// printf into a std::string (the texts here are short).
template <class... Args>
std::string formatted(const char* pattern, Args... args) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, args...);
  return buffer;
}

// "2.1 s/step", "12.3 s/step", "145 s/step", "45.2 ms/step": three significant digits at most.
std::string format_pace(double seconds_per_step) {
  if (seconds_per_step >= 100) return formatted("%.0f s/step", seconds_per_step);
  if (seconds_per_step >= 1) return formatted("%.3g s/step", seconds_per_step);
  const double ms = seconds_per_step * 1000;
  return ms >= 100 ? formatted("%.0f ms/step", ms) : formatted("%.3g ms/step", ms);
}

}  // namespace

void LiveLine::draw(const std::string& text) {
  std::fprintf(stream_, "\r%s\x1b[K", text.c_str());
  std::fflush(stream_);
  drawn_ = true;
}

void LiveLine::erase() {
  if (!drawn_) return;
  std::fputs("\r\x1b[K", stream_);
  std::fflush(stream_);
  drawn_ = false;
}

void LiveLine::finish() {
  if (!drawn_) return;
  std::fputc('\n', stream_);
  std::fflush(stream_);
  drawn_ = false;
}

bool stdout_is_terminal() {
  if (::isatty(STDOUT_FILENO) == 0) return false;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return true;
  // Under mpirun: where mpirun's stdout goes (a local rank's parent is mpirun itself; a remote
  // one's is Open MPI's daemon, whose stdout is no terminal, so the bar stays off there).
  std::error_code ec;
  const std::string target =
      std::filesystem::read_symlink("/proc/" + std::to_string(::getppid()) + "/fd/1", ec).string();
  return !ec && (target.starts_with("/dev/pts/") || target.starts_with("/dev/tty"));
}

std::string format_duration(double seconds) {
  const long long whole = std::llround(std::max(0.0, seconds));
  if (whole < 60) return formatted("%llds", whole);
  if (whole < 3600) return formatted("%lldm%02llds", whole / 60, whole % 60);
  return formatted("%lldh%02lldm", whole / 3600, whole / 60 % 60);
}

std::string progress_bar_text(std::int64_t step, std::int64_t total, double seconds_per_step) {
  const std::int64_t done = std::clamp<std::int64_t>(step, 0, std::max<std::int64_t>(total, 0));
  const std::int64_t filled = total > 0 ? done * kBarCells / total : kBarCells;
  const std::int64_t percent = total > 0 ? done * 100 / total : 100;
  std::string text = "[" + std::string(static_cast<std::size_t>(filled), '#') +
                     std::string(static_cast<std::size_t>(kBarCells - filled), '.') + "] " +
                     std::to_string(done) + "/" + std::to_string(total) + " steps " +
                     std::to_string(percent) + "%";
  if (seconds_per_step > 0 && std::isfinite(seconds_per_step)) {
    text += " | " + format_pace(seconds_per_step) + " | ETA " +
            format_duration(seconds_per_step * static_cast<double>(total - done));
  }
  return text;
}

ProgressBar::ProgressBar(bool enabled, std::int64_t first_step, std::int64_t total_steps)
    : shown_(enabled && stdout_is_terminal()),
      first_step_(first_step),
      total_steps_(total_steps),
      start_(std::chrono::steady_clock::now()),
      line_(stdout) {}

void ProgressBar::draw(std::int64_t step) {
  if (!shown_) return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double seconds_per_step =
      step > first_step_ ? seconds / static_cast<double>(step - first_step_) : 0.0;
  line_.draw(progress_bar_text(step, total_steps_, seconds_per_step));
}

}  // namespace strata
