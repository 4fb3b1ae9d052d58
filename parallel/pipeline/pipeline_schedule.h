// Pipeline-parallel schedules as data (docs/ARCHITECTURE.md §2 "Schedules are data"): a pure
// function turns (schedule kind, stages, micro-batches) into one instruction list per stage; one
// executor runs any list, and `simulate_pipeline` checks a whole program without a device (tests,
// and the trainer's start-up sanity check).
//
// What the executor does with each op, on stage `s` of `p` (buffers are per micro-batch `mb`):
//
//   x[mb]   input activation (B, T, C). Stage 0: none, its Forward reads micro-batch mb of the
//           batch. Other stages: filled by a receive from stage s-1.
//   y[mb]   output activation (B, T, C) written by Forward. Last stage: none, its Forward ends in
//           the loss of mb.
//   dy[mb]  gradient of the loss w.r.t. y[mb]. Filled by a receive from stage s+1. Last stage:
//   none,
//           its Backward starts from the loss (scaled by 1 / accumulation steps).
//   dx[mb]  gradient w.r.t. x[mb], written by Backward. Stage 0: none (its Backward ends in the
//           embedding gradients).
//
//   forward(mb)          run the stage's layers on x[mb] (stage 0: on the batch), keep what
//                        backward(mb) needs, write y[mb] (last stage: the loss). x[mb] must be
//                        here.
//   backward(mb)         from dy[mb] (last stage: from the loss), accumulate parameter gradients,
//                        write dx[mb] (not on stage 0); mb's saved activations may be freed.
//   recv_activation(mb)  receive x[mb] from stage s-1.                   Never on stage 0.
//   send_activation(mb)  send y[mb] to stage s+1; y[mb] may be freed.   Never on the last stage.
//   recv_grad(mb)        receive dy[mb] from stage s+1.                  Never on the last stage.
//   send_grad(mb)        send dx[mb] to stage s-1; dx[mb] may be freed.  Never on stage 0.
//   send_activation_recv_grad(mb, recv_micro_batch = r)
//                        with stage s+1, as ONE exchange (MPI_Sendrecv, or a grouped NCCL
//                        send+recv): send y[mb], receive dy[r].          Never on the last stage.
//   send_grad_recv_activation(mb, recv_micro_batch = r)
//                        with stage s-1, as ONE exchange: send dx[mb], receive x[r].
//                                                                        Never on stage 0.
//
// Matching contract (checked by simulate_pipeline): the k-th communication op of stage s towards
// s+1 and the k-th communication op of stage s+1 towards s are mirror images of each other
// (send_activation <-> recv_activation, recv_grad <-> send_grad, send_activation_recv_grad <->
// send_grad_recv_activation, same micro-batches), so message order identifies the buffer (no tags
// needed), and an executor whose sends, receives and exchanges block until the peer joins never
// deadlocks. Gradient reduction and the optimizer step come after the last op of every stage.
#pragma once

#include <string>
#include <vector>

#include "model/core/choice.h"

namespace strata {

enum class PipelineSchedule {
  gpipe,        // all forwards, then all backwards (in reverse micro-batch order)
  one_f_one_b,  // PipeDream-flush / Megatron-LM 1F1B
};
inline constexpr Choices kPipelineScheduleChoices{
    std::array{ChoiceWord{PipelineSchedule::one_f_one_b, "1f1b"},
               ChoiceWord{PipelineSchedule::gpipe, "gpipe"}}};

// The config strings of `parallel.pipeline_schedule`: "gpipe" and "1f1b".
PipelineSchedule parse_pipeline_schedule(const std::string& name);
std::string pipeline_schedule_name(PipelineSchedule kind);

enum class PipelineOpKind {
  forward,
  backward,
  recv_activation,
  send_activation,
  recv_grad,
  send_grad,
  send_activation_recv_grad,
  send_grad_recv_activation,
};

struct PipelineOp {
  PipelineOpKind kind = PipelineOpKind::forward;
  // The micro-batch computed (forward, backward), sent or received (single transfers), or sent
  // (paired exchanges).
  int micro_batch = 0;
  // Paired exchanges only: the micro-batch whose buffer is received. -1 for every other op.
  int recv_micro_batch = -1;

  friend bool operator==(const PipelineOp&, const PipelineOp&) = default;
};

// e.g. "forward(mb 3)", "send_activation_recv_grad(send mb 3, recv mb 1)".
std::string to_string(const PipelineOp& op);

// Which stage an op talks to, relative to its own: -1 previous, +1 next, 0 none (compute).
int pipeline_op_peer_offset(PipelineOpKind kind);

// One instruction list per stage: program[stage][step].
using PipelineProgram = std::vector<std::vector<PipelineOp>>;

// The per-stage instruction lists of a schedule. Pure; throws strata::Error when stages < 1 or
// micro_batches < 1. micro_batches < stages is allowed (the bubble is then large).
//   gpipe: forwards 0..m-1 (each preceded by its receive, followed by its send), then backwards
//          m-1..0; reverse order so the last stage starts with the micro-batch it just forwarded.
//   1f1b:  warm-up of min(p - s - 1, m) forwards, steady state of one forward then one backward,
//          cool-down of the remaining backwards; at most min(p - s, m) micro-batches' activations
//          are held on stage s, against m for gpipe.
PipelineProgram make_pipeline_schedule(PipelineSchedule kind, int stages, int micro_batches);

struct PipelineStats {
  int makespan = 0;                       // time slots until the last stage finishes
  std::vector<int> busy_slots;            // per stage: slots spent in forward or backward
  double bubble_fraction = 0;             // 1 - sum(busy_slots) / (stages * makespan)
  std::vector<int> max_activations_held;  // per stage: most micro-batches forwarded, not backwarded
};

// Runs every stage's list in lock-step: forward and backward take one time slot, communication
// none, and a transfer or exchange completes only when the peer's mirror op is at the head of its
// list (rendezvous, the strictest blocking semantics). Throws strata::Error naming the stage and op
// on a deadlock, an unmatched or mismatched transfer (wrong micro-batch or direction), an op
// talking to a stage that does not exist, or a data-flow error: a forward before its input arrived,
// a backward before its forward or its output gradient, a send of a buffer not yet computed, any
// micro-batch not forwarded and backwarded exactly once on every stage.
PipelineStats simulate_pipeline(const PipelineProgram& program, int micro_batches);

}  // namespace strata
