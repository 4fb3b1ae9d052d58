// The training loop (llm.c's train_gpt2 shape): every step calls the one training step
// (train/training_step.h) on this rank's backend, then logs, evaluates and checkpoints when due.
// Data-parallel ranks (one per MPI process) each run their share of every global batch as
// gradient-accumulation micro-batches; the reduction plan makes every replica's gradients equal,
// so parameters stay identical across ranks without broadcasts. Checkpoints are written every
// checkpoint.every steps, at the end and on SIGINT/SIGTERM, and resume bit-exactly on any layout.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "parallel/comm/mpi_communicator.h"
#include "plan/config.h"
#include "train/core/test_hooks.h"

namespace strata {

class RunLock;
struct RunCore;
class RunOuter;
class RunCheckpoints;
class RunEvaluator;
class RunReporter;

struct TrainerOptions {
  // Resume: nullopt = fresh run; "" = newest checkpoint of the run; otherwise a checkpoint path.
  std::optional<std::string> resume_from;
  // A fresh run (no resume_from) whose parameters are this checkpoint's weights rather than the
  // seed's (`train --init`): its optimizer state, step, schedule and data start afresh.
  std::optional<std::string> init_from;
  // A fresh run that replaces an earlier run's files in its run directory (`train --overwrite`):
  // its checkpoints are removed, its metrics and config rewritten. Without it, such a directory
  // is an error (train/run_directory.h).
  bool overwrite = false;
  // The test hooks (train/core/test_hooks.h), which `train` reads from STRATA_TEST_HOOKS: empty on
  // a user's run.
  TestHooks test_hooks;
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
  void claim_run(const Config& config, MpiCommunicator& world, const TrainerOptions& options);
  // Rank 0's lock on the run directory (train/run_lock.h), released after the state is gone.
  std::unique_ptr<RunLock> run_lock_;
  // The run's state in components, each with one job (trainer_state.h): what the steps train,
  // DiLoCo's wiring, the evaluation, the checkpoints, the reports.
  std::unique_ptr<RunCore> core_;
  std::unique_ptr<RunOuter> outer_;
  std::unique_ptr<RunEvaluator> evaluator_;
  std::unique_ptr<RunCheckpoints> checkpoints_;
  std::unique_ptr<RunReporter> reporter_;
};

}  // namespace strata
