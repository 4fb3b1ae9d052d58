// The pipeline schedule run on a clock: the same per-stage instruction lists as the trainer
// (parallel/pipeline_schedule.h), with each stage's forward and backward taking their predicted
// seconds and each message the seconds of its link. Transfers are rendezvous, as the executor's
// blocking sends and exchanges are: both stages wait for the later of the two, then for the
// message. What comes out is when each stage finishes its last op and how long it computed, so
// the bubble is what the schedule leaves idle, not a formula's estimate.
#pragma once

#include <vector>

#include "parallel/pipeline_schedule.h"

namespace strata {

struct StageDurations {
  double forward = 0;   // one micro-batch's forward pass
  double backward = 0;  // one micro-batch's backward pass
  double message = 0;   // one activation (or gradient) message to the next stage
};

struct TimedPipeline {
  double makespan = 0;         // when the last stage finishes
  std::vector<double> finish;  // per stage: when it finished its last op
  std::vector<double> busy;    // per stage: seconds computing (passes only)
  double bubble_fraction = 0;  // 1 − Σ busy / (stages · makespan)
};

// Runs `program` (validated by simulate_pipeline) with durations[stage]; message times are those
// of the lower stage of each pair. Throws strata::Error on a deadlock.
TimedPipeline run_pipeline_clock(const PipelineProgram& program,
                                 const std::vector<StageDurations>& durations);

}  // namespace strata
