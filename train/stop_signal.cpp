#include "train/stop_signal.h"

#include <csignal>

namespace strata {
namespace {
volatile std::sig_atomic_t g_stop_requested = 0;  // async-signal-safe flag, the only global state
extern "C" void on_stop_signal(int) { g_stop_requested = 1; }
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void ignore_file_size_signal() { signal(SIGXFSZ, SIG_IGN); }

bool stop_requested() { return g_stop_requested != 0; }

}  // namespace strata
