// The pipeline schedule run on a clock: the same per-stage instruction lists as the trainer
// (parallel/pipeline/pipeline_schedule.h), with each stage's forward and backward taking their
// predicted seconds and each message the seconds of its link. With virtual stages (interleaved,
// zbv) each chunk of a stage takes its own layers' seconds, and a transfer between two chunks of
// one rank (the V's turn) is no op at all: the executor hands the buffer over in place. Transfers
// are rendezvous, as the executor's blocking sends and exchanges are: both stages wait for the
// later of the two, then for the message; or, for the schedules that need them, queued sends (the
// sender goes on, the receiver waits for the message). A split backward's B and W take their shares
// of the backward. What comes out is when each stage finishes its last op and how long it computed,
// so the bubble is what the schedule leaves idle, not a formula's estimate.
//
// Shared cores (a cpu cluster whose ranks outnumber its cores): the passes' seconds are those of
// a rank running alone; while k stages compute at once, their k · ranks_per_stage ranks, each
// wanting `threads` cores, share `cores` (processor sharing) with the ranks waiting (in a bubble,
// for a message), which poll and take `waiting_share` of a core each:
//   speed = min(1, cores / (busy · threads + waiting_share · (ranks − busy))),
// busy = k · ranks_per_stage. What the dependencies leave idle is lost. The simulation is
// event-driven: between two events every running pass advances at its current rate.
#pragma once

#include <vector>

#include "parallel/pipeline/pipeline_schedule.h"

namespace strata {

// Of one stage, or with virtual stages of one chunk of a stage (its own layers).
struct StageDurations {
  double forward = 0;   // one micro-batch's forward pass
  double backward = 0;  // one micro-batch's backward pass
  double message = 0;   // one activation (or gradient) message to the next (virtual) stage
  // Of `backward`, its weight half (W) when a schedule splits it; B takes the rest.
  double backward_weight = 0;
};

struct CoreSharing {
  int cores = 0;             // 0: every rank has its own device (no sharing)
  int ranks_per_stage = 1;   // ranks doing each stage's work at once (tp · cp · dp)
  int threads = 1;           // cores one rank's pass uses when alone
  int ranks = 1;             // all ranks sharing the cores
  double waiting_share = 0;  // of a core, taken by each rank not computing (MPI polling)
};

struct TimedPipeline {
  double makespan = 0;         // when the last stage finishes
  std::vector<double> finish;  // per stage: when it finished its last op
  std::vector<double> busy;    // per stage: seconds its passes took (sharing slows them)
  double bubble_fraction = 0;  // 1 − Σ busy / (stages · makespan)
};

// Runs `program` (validated by simulate_pipeline) with durations[stage][chunk] for the chunks
// `layout` places (one per stage without virtual stages); a transfer goes between neighbouring
// virtual stages, on whichever ranks they live, and takes the `message` time of the lower of the
// two. `nonblocking_sends`: the executor's queued transfers (pipeline_executor.h): a send completes
// at once and its message arrives a message time later; a receive waits for its message (an
// exchange sends, then receives), matched on the executor's tag (micro-batch, receiving chunk,
// direction). Otherwise rendezvous, as above. Throws strata::Error on a deadlock.
TimedPipeline run_pipeline_clock(const PipelineProgram& program, const PipelineLayout& layout,
                                 const std::vector<std::vector<StageDurations>>& durations,
                                 const CoreSharing& sharing = {}, bool nonblocking_sends = false);
// One chunk per stage: durations[stage].
TimedPipeline run_pipeline_clock(const PipelineProgram& program,
                                 const std::vector<StageDurations>& durations,
                                 const CoreSharing& sharing = {}, bool nonblocking_sends = false);

// The speed of each of `busy` ranks computing at once under `sharing` (1: their own speed).
double shared_speed(const CoreSharing& sharing, double busy);

}  // namespace strata
