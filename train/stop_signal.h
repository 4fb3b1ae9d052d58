// SIGINT/SIGTERM request a clean stop: the handler only sets a flag; the trainer checks it after
// each step (agreeing across ranks), writes a checkpoint and exits with status 0.
#pragma once

namespace strata {

void install_stop_signal_handlers();
bool stop_requested();

// A file that outgrows the process's size limit (RLIMIT_FSIZE, which batch schedulers set) would
// kill the rank with SIGXFSZ in the middle of a checkpoint; ignored, the write fails with EFBIG
// like one on a full disk, and the run stops with an error naming the checkpoint. Called first
// thing in main (MPI's launcher resets the signal for the ranks it starts).
void ignore_file_size_signal();

}  // namespace strata
