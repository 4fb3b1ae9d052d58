// The outer loop around the trainer's inner steps: nothing for plain training, DiLoCo's outer
// syncs (train/diloco/diloco.h) otherwise. Trainer::run() calls it at the same four points of every
// run and never asks which one it has, so the loop reads the same for both.
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/mesh/process_groups.h"
#include "train/backend/training_backend.h"
#include "train/core/training_progress.h"
#include "train/diloco/diloco.h"
#include "train/diloco/diloco_run.h"
#include "train/diloco/elastic_worker.h"
#include "train/diloco/logical_replica.h"
#include "train/metrics/metrics.h"

namespace strata {

// The plain form does nothing.
class OuterLoop {
 public:
  virtual ~OuterLoop() = default;
  // Before the first step. Elastic DiLoCo: meets the group (a fresh one: waits for
  // diloco.min_workers; one that has synced past this run's step: joins it at its next sync,
  // which moves `progress` to that step).
  // False when there is nothing left to train: an elastic group that has finished (its next sync
  // would be past train.steps); the run then ends without a step, evaluation or checkpoint.
  virtual bool start(TrainingBackend&) { return true; }
  // Before an inner step's work. DiLoCo: a sync's overlapped reduction is in flight from here,
  // and the syncs' bytes are counted from here.
  virtual void begin_inner_step() {}
  // After inner step `step`, unless it stopped the run: the outer sync that is due, if any.
  virtual void end_inner_step(TrainingBackend&, std::int64_t /*step*/) {}
  // Of the last end_inner_step, the seconds spent waiting for other workers (elastic DiLoCo:
  // deciding a sync's members), which the step's time leaves out.
  virtual double member_wait_seconds() const { return 0; }
  // After the step's own line: the lines of the syncs end_inner_step ran (`loss`: the step's).
  virtual void report(double /*loss*/) {}
  // After the last step: a sync still in flight, applied and reported (`loss`: the last step's).
  virtual void finish(TrainingBackend&, double /*loss*/) {}
};

// DiLoCo's outer loop over `diloco` and the worker axis of `groups`, reporting through
// report_outer_syncs (diloco_run.h) to `metrics` (rank 0's writer, null on the other ranks).
// Nothing is owned.
std::unique_ptr<OuterLoop> make_diloco_loop(Diloco& diloco, const ProcessGroups& groups,
                                            MetricsWriter* metrics);

// Elastic DiLoCo's outer loop (train/diloco/elastic_worker.h): each sync's members are decided in
// the group's store and average over Gloo; joiners take the state; a worker that a sync left out
// joins the next one. `total_steps`: train.steps. `progress` is the run's (a join moves it to the
// group's step, whose data position is step · global_batch). `logical`: with workers of any layout
// (diloco.layouts any), the job's logical copy on which rank 0 alone runs `diloco`; null otherwise.
// Nothing is owned.
std::unique_ptr<OuterLoop> make_elastic_loop(Diloco& diloco, ElasticWorker& worker,
                                             LogicalReplica* logical, TrainingProgress& progress,
                                             int global_batch, std::int64_t total_steps,
                                             const ProcessGroups& groups, MetricsWriter* metrics);

}  // namespace strata
