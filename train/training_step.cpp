#include "train/training_step.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "model/core/error.h"
#include "train/optimizer/optimizer.h"

namespace strata {

StepResult training_step(TrainingBackend& backend, const ReductionGroups& groups,
                         const StepSettings& settings, const MicroBatchSource& source,
                         LossScaler& scaler, TrainingProgress& progress) {
  StepResult result;
  // The backward pass starts from scale · mean loss; the gradients are unscaled (below) before
  // clipping and the update. Without fp16 loss scaling the scale is 1.
  result.loss_scale = scaler.scale();
  // Each rank's loss is the mean over its micro-batch's rows, a 1/cp share of its sequences':
  // the sum over the dp × cp ranks (ReductionGroups::dp) is cp times the replicas' mean.
  const int batches_in_step = settings.accumulation * settings.dp * settings.cp;
  const float loss_scale =
      static_cast<float>(result.loss_scale) / static_cast<float>(batches_in_step);

  const double local_loss = backend.accumulate_gradients(settings.accumulation, loss_scale, source);
  backend.reduce_gradients();
  // Summed over every rank, so all ranks agree on overflow and skip together.
  const TestHooks* hooks = settings.test_hooks;
  const bool inject_nonfinite = hooks && hooks->nonfinite_steps.contains(progress.step + 1);
  const double local_sum_of_squares = inject_nonfinite ? std::numeric_limits<double>::quiet_NaN()
                                                       : backend.gradient_sum_of_squares();
  const double sum_of_squares =
      sum_over_axes(local_sum_of_squares, backend.plan().norm_axes, groups);
  // The loss lives on the last stage of every replica (each of its context ranks).
  const double loss_sum = sum_over_axes(local_loss, {ParallelAxis::pp, ParallelAxis::dp}, groups);

  result.loss = loss_sum / batches_in_step;
  result.grad_norm = std::sqrt(sum_of_squares) / result.loss_scale;
  const bool finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  result.scale_overflow = std::isfinite(result.loss) && !finite && scaler.can_back_off();
  scaler.update(finite);
  if (finite) {
    progress.optimizer_steps += 1;
    const double grad_scale = clip_factor(result.grad_norm, settings.grad_clip) / result.loss_scale;
    const bool kill = hooks && hooks->kill_in_update == progress.optimizer_steps;
    backend.apply_optimizer(OptimizerStep{settings.lr, grad_scale, progress.optimizer_steps, kill});
    result.applied = true;
    progress.consecutive_nonfinite = 0;
  } else if (!result.scale_overflow &&
             ++progress.consecutive_nonfinite >= settings.max_nonfinite_in_a_row) {
    result.stop = true;
  }
  progress.step += 1;
  progress.data_position += settings.global_batch;
  return result;
}

std::string nonfinite_stop_message(const StepSettings& settings, const TrainingProgress& progress,
                                   std::int64_t last_checkpoint_step) {
  std::ostringstream message;
  if (settings.max_nonfinite_in_a_row == 1)
    message << "loss or gradients non-finite at step " << progress.step
            << " (train.nonfinite: stop); stopping";
  else
    message << "loss or gradients non-finite for " << progress.consecutive_nonfinite
            << " steps in a row at step " << progress.step << " (train.nonfinite_limit); stopping";
  if (last_checkpoint_step >= 0)
    message << ": the last checkpoint, step " << last_checkpoint_step
            << ", is intact (--resume continues from it)";
  else
    message << " before the first checkpoint: there is nothing to resume (a lower optimizer.lr, "
               "or optimizer.grad_clip, may keep the run finite)";
  return message.str();
}

int max_nonfinite_in_a_row(const TrainConfig& train) {
  return train.nonfinite == NonfinitePolicy::stop ? 1 : train.nonfinite_limit;
}

}  // namespace strata
