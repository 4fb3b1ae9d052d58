// One training step (docs/ARCHITECTURE.md §2), the same for every backend and layout, and the
// training state it advances. DiLoCo calls it H times between its outer steps; `bench train`
// times it.
//
// A step: the micro-batches' gradients of scale · mean loss are accumulated (the backend runs its
// pipeline program), reduced by the plan, their global norm taken (Σ g² over the plan's norm
// ranges, summed over its norm groups, unscaled), then, when loss and norm are finite, clipped
// and applied by the optimizer on the owned range. An fp16 overflow under a dynamic loss scale is
// routine: the step is skipped and the scale halved; any other non-finite step is skipped too and
// counts towards the stop policy (train.nonfinite: `max_nonfinite_in_a_row` such steps in a row
// end the run, the last checkpoint intact).
#pragma once

#include <cstdint>
#include <set>
#include "parallel/mesh/host_reduction.h"
#include "parallel/pipeline/pipeline_executor.h"
#include "plan/config.h"
#include "train/backend/training_backend.h"
#include "train/optimizer/loss_scale.h"

namespace strata {

// What a run has done so far: restored from and saved in checkpoints.
struct TrainingProgress {
  std::int64_t step = 0;             // steps completed (skipped ones included)
  std::int64_t data_position = 0;    // global index of the next training sample
  std::int64_t optimizer_steps = 0;  // updates applied: AdamW's bias-correction count
  int consecutive_nonfinite = 0;     // non-finite steps in a row (not fp16 overflows)
};

// What one step needs besides the backend.
struct StepSettings {
  int accumulation = 1;  // micro-batches per replica
  int dp = 1;            // data-parallel replicas: the mean loss is over accumulation · dp
  int global_batch = 1;  // sequences per step (data_position advances by it)
  double lr = 0;
  double grad_clip = 0;
  int max_nonfinite_in_a_row = 3;  // non-finite steps in a row that stop the run (1: the first)
  // Test-only (the trainer sets it from STRATA_TEST_NONFINITE_STEPS, never from the config): this
  // step's gradients count as non-finite, as a NaN in any rank's gradients would make them.
  bool inject_nonfinite_gradients = false;
};

// Why a run stopped on non-finite steps (result.stop), and what is left to resume from:
// `last_checkpoint_step` is the step of the newest checkpoint this run wrote or resumed from, -1
// when there is none (a run that diverged before its first checkpoint has nothing to resume).
std::string nonfinite_stop_message(const StepSettings& settings, const TrainingProgress& progress,
                                   std::int64_t last_checkpoint_step);

// settings.max_nonfinite_in_a_row for the config's train.nonfinite policy.
int max_nonfinite_in_a_row(const TrainConfig& train);

// The steps (1-based) whose gradients a test makes non-finite: STRATA_TEST_NONFINITE_STEPS, a
// comma-separated list, read once at start-up. A test hook, deliberately not a config key.
std::set<std::int64_t> test_nonfinite_steps();
// Seconds each step is made to last at least: STRATA_TEST_STEP_SECONDS (0 when unset), so that a
// test of elastic DiLoCo can act inside an inner phase on busy machines. A test hook too.
double test_step_seconds();

struct StepResult {
  double loss = 0;              // mean over the global batch, on every rank
  double grad_norm = 0;         // of the unscaled gradients, on every rank
  double loss_scale = 1;        // the scale this step used
  bool applied = false;         // the optimizer ran
  bool scale_overflow = false;  // skipped as an fp16 overflow (the scale was halved)
  // The non-finite policy ends the run here: the same on every rank (they share the sums). The
  // caller logs the step first, then stops with nonfinite_stop_message.
  bool stop = false;
};

// One step. `groups`: the tp, dp and pp groups; the loss is summed over pp then dp, Σ g² over the
// norm groups.
StepResult training_step(TrainingBackend& backend, const ReductionGroups& groups,
                         const StepSettings& settings, const MicroBatchSource& source,
                         LossScaler& scaler, TrainingProgress& progress);

}  // namespace strata
