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
#include "train/core/test_hooks.h"
#include "train/core/training_progress.h"
#include "train/optimizer/loss_scale.h"

namespace strata {

// What one step needs besides the backend.
struct StepSettings {
  int accumulation = 1;  // micro-batches per replica
  int dp = 1;            // data-parallel replicas: the mean loss is over accumulation · dp
  int cp = 1;  // context-parallel ranks, each a mean over its rows: their mean is a sequence's
  int global_batch = 1;  // sequences per step (data_position advances by it)
  double lr = 0;
  double grad_clip = 0;
  int max_nonfinite_in_a_row = 3;  // non-finite steps in a row that stop the run (1: the first)
  // The run's test hooks (train/core/test_hooks.h: non-finite steps, a killed update); null on a
  // user's run and in `bench`.
  const TestHooks* test_hooks = nullptr;
};

// Why a run stopped on non-finite steps (result.stop), and what is left to resume from:
// `last_checkpoint_step` is the step of the newest checkpoint this run wrote or resumed from, -1
// when there is none (a run that diverged before its first checkpoint has nothing to resume).
std::string nonfinite_stop_message(const StepSettings& settings, const TrainingProgress& progress,
                                   std::int64_t last_checkpoint_step);

// settings.max_nonfinite_in_a_row for the config's train.nonfinite policy.
int max_nonfinite_in_a_row(const TrainConfig& train);

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
