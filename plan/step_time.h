// The planner's step-time model: one training step of a layout on a cluster, in seconds.
//
// Every pipeline stage is priced on its first rank (tensor- and data-parallel rank 0):
//   forward, backward   one micro-batch's pass: its compute (plan/compute_model.h) plus the
//                       blocking collectives inside it (tensor-parallel sums and gathers, ZeRO 2/3
//                       reduce-scatters after every pass), each over the α–β model of the slowest
//                       link it crosses (plan/comm_model.h has the bytes), plus ZeRO 3's weight
//                       gathers where the compute does not hide them: a cuda cluster prefetches
//                       the next segment while computing (hidden up to the compute time); on a cpu
//                       cluster MPI progresses only inside calls, so nothing is hidden;
//   message             one activation or gradient message to the neighbouring stage.
// With virtual stages (interleaved, zbv: parallel.virtual_stages chunks per rank) each chunk is
// priced on its own layers (its embedding or head where it holds them), the rank's blocking
// collectives spread over its chunks' passes as their compute is, and its message is that of its
// own boundary (none at the V's turn, where the next virtual stage is on the same rank).
// The stages' passes and messages run on the pipeline clock (plan/timed_pipeline.h) under the
// configured schedule; each stage then runs its end-of-step communication (gradient reductions,
// norm and loss scalars), and after the slowest has, the optimizer and the updated-shard gathers:
//   step = max over stages (pipeline finish + end-of-step communication)
//        + max over stages (optimizer + update gathers).
// A cpu cluster is one host whose ranks share its cores (cores_per_node · nodes; nodes there are
// simulated): each rank runs max(1, cores / ranks) threads, the pipeline clock shares the cores
// among the ranks computing at each moment (plan/timed_pipeline.h), a pipeline message takes at
// least busy_latency_us (its peer must get a core back: measured by bench calibrate), and the
// end-of-step work of all ranks at once runs at their shared speed.
#pragma once

#include <map>
#include <vector>

#include "parallel/comm/communicator.h"
#include "plan/cluster.h"
#include "plan/comm_model.h"
#include "plan/config.h"

namespace strata {

// A stage's figures; with virtual stages its passes are one micro-batch through all its chunks.
struct StageTime {
  double forward_compute = 0, backward_compute = 0;  // one micro-batch
  double forward = 0, backward = 0;                  // one micro-batch, blocking comm included
  double message = 0;         // one message to the next stage (the slowest of its chunks')
  double pass_comm = 0;       // per step: the blocking collectives inside the passes
  double gather_exposed = 0;  // per step: ZeRO 3 gather time not hidden by compute
  double step_comm = 0;       // after the passes
  double optimizer = 0;
  double update_comm = 0;                    // after the optimizer
  std::map<LinkClass, double> comm_seconds;  // per step, by link class
};

struct StepTime {
  double seconds = 0;
  double pipeline = 0;         // the pipeline clock's makespan
  double bubble_fraction = 0;  // of the pipeline clock
  // Per stage, on the clock: when it finished its program, and of that the time it did not
  // compute (its idle time inside the schedule), as the trainer's pipeline_ms_by_stage and
  // pipeline_idle_ms_by_stage measure them.
  std::vector<double> stage_pipeline, stage_idle;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs (6N + 12LCT per token) over the devices' peak
  std::vector<StageTime> stages;
  CommPrediction rank0_comm;  // the communication of rank 0 (first stage)
  int threads = 1;            // per rank (cpu)
};

// Seconds of one call of `event` (α–β over its slowest link; an all-to-all sums its links; a
// pipeline message at least the cluster's busy_latency_us; on a cuda cluster a ring that crosses
// nodes with k members on each runs its node-crossing hop on k devices' links, NCCL's multi-rail
// channels, up to the bandwidth inside the node).
double event_seconds(const CommEvent& event, const ClusterSpec& cluster);

// The step of `config`'s layout on `world_size` ranks of `cluster` (the config's
// parallel.gpus_per_node places the nodes).
StepTime predict_step_time(const Config& config, const ClusterSpec& cluster, int world_size);

}  // namespace strata
