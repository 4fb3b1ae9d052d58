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
//
// Chunks and the split backward (interleaved 1F1B, ZB-H1, ZB-H2, ZBV): the generators below
// produce them, simulate_pipeline checks them, and the executor runs them (several chunks per rank
// with queued sends only).
//
//   chunk                every op carries the chunk (virtual stage on this rank) whose buffers it
//                        computes or moves; 0 for gpipe and 1f1b. With v chunks per rank the
//                        model is cut into p·v virtual stages; PipelineLayout says where each
//                        lives (looped: virtual stage c·p + s, so chunk c of the last rank feeds
//                        chunk c+1 of rank 0, the ring wraps; v_shape: chunk 0 is virtual stage
//                        s, chunk 1 is 2p-1-s, so rank 0 holds the first and the last).
//   backward_input(mb)   B: from dy[mb], write dx[mb] only (what the previous stage waits for);
//                        keeps what backward_weight(mb) needs.
//   backward_weight(mb)  W: accumulate the parameter gradients of mb; its activations may be
//                        freed. backward(mb) stays the fused B then W.
//   transfers            "previous" and "next" are the neighbouring virtual stages of the op's
//                        chunk, on whichever rank they live; an op's chunk is its own side's.
//                        Where the neighbouring virtual stage is on the same rank (v_shape's turn
//                        on the last rank) there is no transfer: the forward of chunk 1 reads
//                        chunk 0's y in place, and chunk 0's backward reads chunk 1's dx in place.
//
// Interleaved, ZB-H1, ZB-H2 and ZBV are written with single transfers that need sends which do
// not block (the executor's nonblocking_sends: a send completes at once and its buffer is queued
// for the receiver on the (sender, receiver, activation or gradient) channel, tagged with its
// micro-batch and chunk); under rendezvous two neighbours sending to each other would wait
// forever. simulate_pipeline models either executor.
#pragma once

#include <string>
#include <vector>

#include "model/core/choice.h"

namespace strata {

enum class PipelineSchedule {
  gpipe,        // all forwards, then all backwards (in reverse micro-batch order)
  one_f_one_b,  // PipeDream-flush / Megatron-LM 1F1B
  zb_h1,        // zero bubble H1 (Qi et al., ICLR 2024): 1F1B with W moved into the bubbles
  zb_h2,        // zero bubble H2: more forwards in flight, no bubble between first and last op
  interleaved,  // Megatron-LM interleaved 1F1B (Narayanan et al., SC'21), v >= 2 looped chunks
  zbv,          // zero bubble V: two chunks per rank in a V
};
inline constexpr Choices kPipelineScheduleChoices{std::array{
    ChoiceWord{PipelineSchedule::one_f_one_b, "1f1b"}, ChoiceWord{PipelineSchedule::gpipe, "gpipe"},
    ChoiceWord{PipelineSchedule::zb_h1, "zb-h1"}, ChoiceWord{PipelineSchedule::zb_h2, "zb-h2"},
    ChoiceWord{PipelineSchedule::interleaved, "interleaved"},
    ChoiceWord{PipelineSchedule::zbv, "zbv"}}};

// The config strings of `parallel.pipeline_schedule`: "1f1b", "gpipe", "zb-h1", "zb-h2",
// "interleaved" and "zbv", and back.
PipelineSchedule parse_pipeline_schedule(const std::string& name);
std::string pipeline_schedule_name(PipelineSchedule kind);

// Whether the schedule's programs split the backward into B and W (the model then keeps each
// micro-batch's weight stash from B to W: GptOptions::split_backward).
bool pipeline_schedule_splits_backward(PipelineSchedule kind);

enum class PipelineOpKind {
  forward,
  backward,  // fused: backward_input then backward_weight
  recv_activation,
  send_activation,
  recv_grad,
  send_grad,
  send_activation_recv_grad,
  send_grad_recv_activation,
  backward_input,   // B: the input gradient only
  backward_weight,  // W: the weight gradients only
};

struct PipelineOp {
  PipelineOpKind kind = PipelineOpKind::forward;
  // The micro-batch computed (forward, backward), sent or received (single transfers), or sent
  // (paired exchanges).
  int micro_batch = 0;
  // Paired exchanges only: the micro-batch whose buffer is received. -1 for every other op.
  int recv_micro_batch = -1;
  // The chunk (virtual stage on this rank) whose buffers the op computes or moves.
  int chunk = 0;

  friend bool operator==(const PipelineOp&, const PipelineOp&) = default;
};

// e.g. "forward(mb 3)", "send_activation_recv_grad(send mb 3, recv mb 1)", "forward(mb 3, chunk
// 1)": the chunk is printed only when it is not 0, so single-chunk programs read as before.
std::string to_string(const PipelineOp& op);

// Which virtual stage an op talks to, relative to its own: -1 previous, +1 next, 0 none
// (compute). With one chunk per rank that is also the stage.
int pipeline_op_peer_offset(PipelineOpKind kind);

// True for the paired exchanges (send_activation_recv_grad, send_grad_recv_activation).
bool pipeline_op_is_exchange(PipelineOpKind kind);

// Where the chunks of a program live (see the header comment).
enum class ChunkPlacement { looped, v_shape };
struct PipelineLayout {
  int chunks = 1;  // v, chunks per rank
  ChunkPlacement placement = ChunkPlacement::looped;
};

// The virtual stage of (stage, chunk), and back. Virtual stages run 0..stages·chunks-1.
int pipeline_virtual_stage(const PipelineLayout& layout, int stages, int stage, int chunk);
struct StageChunk {
  int stage = 0, chunk = 0;
};
StageChunk pipeline_stage_chunk(const PipelineLayout& layout, int stages, int virtual_stage);

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

// Every schedule, with v chunks per rank (`parallel.virtual_stages`; 1 for gpipe, 1f1b, zb_h1 and
// zb_h2, at least 2 for interleaved, exactly 2 for zbv: anything else throws strata::Error naming
// the rule). gpipe and 1f1b give exactly the 3-argument function's programs.
//   interleaved: Megatron-LM's order: forwards walk micro-batches in groups of p through the
//          chunks (group g, chunk c: micro-batches g·p..g·p+p-1), backwards the same with the
//          chunks reversed; stage s warms up with 2(p - s - 1) + (v - 1)p forwards, then 1F1B.
//          micro_batches must be a multiple of p (the order walks whole groups of p); with
//          m == p it is all warm-up. Its idle time per stage is 1F1B's divided by v.
//   zb_h1: 1F1B's order of forwards and backwards, each backward split into B and W, and each
//          W run where the stage would otherwise wait (a list schedule in unit slots,
//          pipeline_generators.h), holding at most min(p, m) micro-batches per stage: 1F1B's
//          peak. With F = B = W it idles p - 1 slots per stage against 1F1B's 3(p - 1) and ends
//          at 3m + p - 1 (m >= p): the paper's third.
//   zb_h2: greedy list schedule (B before F before W) with up to 2p - 1 micro-batches in flight
//          per stage, which removes the bubble between each stage's first and last op (m >=
//          2p - 1); with F = B = W it ends at the bound 3m + p - 1.
//   zbv:   the same greedy scheduler over the V of 2p virtual stages, up to 2p chunk-micro-
//          batches held per rank (half-size chunks: 1F1B's memory); with F = B = W per chunk it
//          ends at 6m + p - 1, half ZB-H2's ramp.
PipelineProgram make_pipeline_schedule(PipelineSchedule kind, int stages, int micro_batches,
                                       int virtual_stages);

// Where make_pipeline_schedule(kind, ..., virtual_stages) puts its chunks, and whether its
// transfers need sends that do not block (interleaved, zb_h1, zb_h2, zbv).
PipelineLayout pipeline_schedule_layout(PipelineSchedule kind, int virtual_stages);
bool pipeline_schedule_needs_nonblocking_sends(PipelineSchedule kind);

struct PipelineStats {
  int makespan = 0;                       // time slots until the last stage finishes
  std::vector<int> busy_slots;            // per stage: slots spent computing
  double bubble_fraction = 0;             // 1 - sum(busy_slots) / (stages * makespan)
  std::vector<int> max_activations_held;  // per stage: most (chunk, micro-batch) pairs forwarded
                                          // and not yet through their W (or fused backward)
  std::vector<std::vector<int>> max_held_by_chunk;  // [stage][chunk]: the same per chunk (the
                                                    // activation slots of each chunk's model)
  // Per stage: idle slots between the start of its first compute and the end of its last, the
  // bubble left once the ramp-up and ramp-down of the pipeline are set aside.
  std::vector<int> interior_idle_slots;
};

// Slots per compute op; a fused backward costs backward_input + backward_weight.
struct PipelineCosts {
  int forward = 1, backward_input = 1, backward_weight = 1;
};

struct PipelineSimulation {
  PipelineLayout layout;
  PipelineCosts costs;
  // false: rendezvous (a transfer or exchange completes only when the peer's mirror op is at the
  // head of its list, today's executor). true: a send completes at once and queues its buffer on
  // the (sender, receiver, activation or gradient) channel, tagged (micro-batch, chunk); a receive
  // waits until the buffer with its tag is there; an exchange sends, then receives.
  bool nonblocking_sends = false;
};

// Runs every stage's list in lock-step: compute ops take their cost in slots, communication none.
// Throws strata::Error naming the stage and op on a deadlock, an unmatched or mismatched transfer
// (wrong micro-batch, chunk or direction), an op talking to a stage that does not exist or to its
// own rank, a buffer sent and never received, or a data-flow error: a forward before its input
// arrived, a backward before its forward or its output gradient, a W before its B, a send of a
// buffer not yet computed, any micro-batch not forwarded, B'd and W'd exactly once per chunk.
PipelineStats simulate_pipeline(const PipelineProgram& program, int micro_batches,
                                const PipelineSimulation& simulation);

// Today's model: one chunk, rendezvous, forward and fused backward one slot each.
PipelineStats simulate_pipeline(const PipelineProgram& program, int micro_batches);

// How the executor runs make_pipeline_schedule(kind, ..., virtual_stages)'s programs: its chunk
// placement, and sends that queue where the schedule needs them; unit costs.
PipelineSimulation pipeline_schedule_simulation(PipelineSchedule kind, int virtual_stages = 1);

}  // namespace strata
