// SIGINT/SIGTERM request a clean stop: the handler only sets a flag; the trainer checks it after
// each step (agreeing across ranks), writes a checkpoint and exits with status 0.
#pragma once

namespace strata {

void install_stop_signal_handlers();
bool stop_requested();

}  // namespace strata
