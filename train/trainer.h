// The training loop: data-parallel ranks (one per MPI process) each run their share of every
// global batch as gradient-accumulation micro-batches, all-reduce the gradients, clip and apply
// AdamW. Logs, evaluates, checkpoints (every checkpoint.every steps, at the end, on SIGINT/SIGTERM)
// and resumes bit-exactly. Every rank computes the same update from the same reduced gradients,
// so parameters stay identical across ranks without broadcasts.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "parallel/mpi_communicator.h"
#include "train/config.h"

namespace strata {

struct TrainerOptions {
  // Resume: nullopt = fresh run; "" = newest checkpoint of the run; otherwise a checkpoint path.
  std::optional<std::string> resume_from;
};

class Trainer {
 public:
  Trainer(const Config& config, MpiCommunicator& world, const TrainerOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs until train.steps or a stop signal. Returns the process exit status.
  int run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace strata
