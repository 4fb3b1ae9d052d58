#include "parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <cstddef>
#include <sstream>

#include "model/core/error.h"
#include "parallel/pipeline/pipeline_generators.h"

namespace strata {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (const auto kind = kPipelineScheduleChoices.find(name)) return *kind;
  fail("unknown pipeline schedule '", name, "' (expected ", kPipelineScheduleChoices.list(), ")");
}

std::string pipeline_schedule_name(PipelineSchedule kind) {
  return std::string(kPipelineScheduleChoices.word(kind));
}

bool pipeline_schedule_splits_backward(PipelineSchedule kind) {
  return kind == PipelineSchedule::zb_h1 || kind == PipelineSchedule::zb_h2 ||
         kind == PipelineSchedule::zbv;
}

namespace {

const char* kind_name(PipelineOpKind kind) {
  switch (kind) {
    case PipelineOpKind::forward:
      return "forward";
    case PipelineOpKind::backward:
      return "backward";
    case PipelineOpKind::recv_activation:
      return "recv_activation";
    case PipelineOpKind::send_activation:
      return "send_activation";
    case PipelineOpKind::recv_grad:
      return "recv_grad";
    case PipelineOpKind::send_grad:
      return "send_grad";
    case PipelineOpKind::send_activation_recv_grad:
      return "send_activation_recv_grad";
    case PipelineOpKind::send_grad_recv_activation:
      return "send_grad_recv_activation";
    case PipelineOpKind::backward_input:
      return "backward_input";
    case PipelineOpKind::backward_weight:
      return "backward_weight";
  }
  return "?";
}

}  // namespace

bool pipeline_op_is_exchange(PipelineOpKind kind) {
  return kind == PipelineOpKind::send_activation_recv_grad ||
         kind == PipelineOpKind::send_grad_recv_activation;
}

std::string to_string(const PipelineOp& op) {
  std::ostringstream text;
  text << kind_name(op.kind);
  if (pipeline_op_is_exchange(op.kind))
    text << "(send mb " << op.micro_batch << ", recv mb " << op.recv_micro_batch;
  else
    text << "(mb " << op.micro_batch;
  if (op.chunk != 0) text << ", chunk " << op.chunk;
  text << ")";
  return text.str();
}

int pipeline_op_peer_offset(PipelineOpKind kind) {
  switch (kind) {
    case PipelineOpKind::recv_activation:
    case PipelineOpKind::send_grad:
    case PipelineOpKind::send_grad_recv_activation:
      return -1;
    case PipelineOpKind::send_activation:
    case PipelineOpKind::recv_grad:
    case PipelineOpKind::send_activation_recv_grad:
      return +1;
    case PipelineOpKind::forward:
    case PipelineOpKind::backward:
    case PipelineOpKind::backward_input:
    case PipelineOpKind::backward_weight:
      return 0;
  }
  return 0;
}

int pipeline_virtual_stage(const PipelineLayout& layout, int stages, int stage, int chunk) {
  if (layout.placement == ChunkPlacement::v_shape && chunk % 2 == 1)
    return (chunk + 1) * stages - 1 - stage;  // the V turns back down on the last rank
  return chunk * stages + stage;
}

StageChunk pipeline_stage_chunk(const PipelineLayout& layout, int stages, int virtual_stage) {
  const int chunk = virtual_stage / stages, offset = virtual_stage % stages;
  if (layout.placement == ChunkPlacement::v_shape && chunk % 2 == 1)
    return {stages - 1 - offset, chunk};
  return {offset, chunk};
}

// ---------------------------------------------------------------------------------------------
// Generators

namespace {

using Kind = PipelineOpKind;

std::vector<PipelineOp> gpipe_stage(int stage, int stages, int micro_batches) {
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<PipelineOp> ops;
  for (int mb = 0; mb < micro_batches; ++mb) {
    if (!first) ops.push_back({Kind::recv_activation, mb});
    ops.push_back({Kind::forward, mb});
    if (!last) ops.push_back({Kind::send_activation, mb});
  }
  // Single transfers cannot deadlock here: in each phase data flows one way only, and a stage is
  // never waiting on a send while its peer waits on a send back.
  for (int mb = micro_batches - 1; mb >= 0; --mb) {
    if (!last) ops.push_back({Kind::recv_grad, mb});
    ops.push_back({Kind::backward, mb});
    if (!first) ops.push_back({Kind::send_grad, mb});
  }
  return ops;
}

// Megatron-LM's forward_backward_pipelining_without_interleaving, op for op.
std::vector<PipelineOp> one_f_one_b_stage(int stage, int stages, int micro_batches) {
  const bool first = stage == 0, last = stage == stages - 1;
  // Stage s must have p - s - 1 micro-batches in flight before the first gradient can come back.
  const int warmup = std::min(stages - stage - 1, micro_batches);
  const int steady = micro_batches - warmup;
  std::vector<PipelineOp> ops;
  for (int mb = 0; mb < warmup; ++mb) {  // warmup > 0 implies this is not the last stage
    if (!first) ops.push_back({Kind::recv_activation, mb});
    ops.push_back({Kind::forward, mb});
    ops.push_back({Kind::send_activation, mb});
  }
  if (steady > 0 && !first) ops.push_back({Kind::recv_activation, warmup});
  for (int i = 0; i < steady; ++i) {
    const int forward_mb = warmup + i, backward_mb = i;
    ops.push_back({Kind::forward, forward_mb});
    // In the steady state stage s sends an activation up while stage s+1 sends a gradient down;
    // as two blocking sends they would wait on each other forever, so each pair is one exchange.
    if (!last) ops.push_back({Kind::send_activation_recv_grad, forward_mb, backward_mb});
    ops.push_back({Kind::backward, backward_mb});
    if (first) continue;
    if (i + 1 < steady)
      ops.push_back({Kind::send_grad_recv_activation, backward_mb, forward_mb + 1});
    else
      ops.push_back({Kind::send_grad, backward_mb});  // no forward left to receive
  }
  for (int mb = steady; mb < micro_batches; ++mb) {
    if (!last) ops.push_back({Kind::recv_grad, mb});
    ops.push_back({Kind::backward, mb});
    if (!first) ops.push_back({Kind::send_grad, mb});
  }
  return ops;
}

void check_sizes(int stages, int micro_batches) {
  if (stages < 1) fail("pipeline schedule: stages must be at least 1, got ", stages);
  if (micro_batches < 1)
    fail("pipeline schedule: micro_batches must be at least 1, got ", micro_batches);
}

}  // namespace

PipelineProgram make_pipeline_schedule(PipelineSchedule kind, int stages, int micro_batches) {
  return make_pipeline_schedule(kind, stages, micro_batches, 1);
}

PipelineProgram make_pipeline_schedule(PipelineSchedule kind, int stages, int micro_batches,
                                       int virtual_stages) {
  check_sizes(stages, micro_batches);
  const std::string name = pipeline_schedule_name(kind);
  switch (kind) {
    case PipelineSchedule::interleaved:
      if (virtual_stages < 2)
        fail("pipeline schedule interleaved: needs at least 2 virtual stages per rank, got ",
             virtual_stages);
      if (micro_batches % stages != 0)
        fail(
            "pipeline schedule interleaved: micro-batches must be a multiple of the pipeline "
            "stages (the order walks whole groups of ",
            stages, " micro-batches through each chunk), got ", micro_batches, " for ", stages,
            " stages");
      return interleaved_program(stages, micro_batches, virtual_stages);
    case PipelineSchedule::zbv:
      if (virtual_stages != 2)
        fail(
            "pipeline schedule zbv: needs exactly 2 virtual stages per rank (the two arms of "
            "the V), got ",
            virtual_stages);
      return greedy_zero_bubble_program(stages, micro_batches,
                                        pipeline_schedule_layout(kind, virtual_stages), 2 * stages);
    case PipelineSchedule::gpipe:
    case PipelineSchedule::one_f_one_b:
    case PipelineSchedule::zb_h1:
    case PipelineSchedule::zb_h2:
      break;
  }
  if (virtual_stages != 1)
    fail("pipeline schedule ", name, ": runs one chunk per rank, got ", virtual_stages,
         " virtual stages");
  if (kind == PipelineSchedule::zb_h2)
    return greedy_zero_bubble_program(stages, micro_batches, PipelineLayout{}, 2 * stages - 1);
  PipelineProgram program;
  program.reserve(static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage) {
    if (kind == PipelineSchedule::gpipe)
      program.push_back(gpipe_stage(stage, stages, micro_batches));
    else
      program.push_back(one_f_one_b_stage(stage, stages, micro_batches));
  }
  if (kind == PipelineSchedule::zb_h1)  // at 1F1B's peak of micro-batches held
    return zb_h1_program(program, micro_batches, std::min(stages, micro_batches));
  return program;
}

PipelineLayout pipeline_schedule_layout(PipelineSchedule kind, int virtual_stages) {
  PipelineLayout layout;
  layout.chunks = virtual_stages;
  layout.placement =
      kind == PipelineSchedule::zbv ? ChunkPlacement::v_shape : ChunkPlacement::looped;
  return layout;
}

bool pipeline_schedule_needs_nonblocking_sends(PipelineSchedule kind) {
  return kind == PipelineSchedule::interleaved || kind == PipelineSchedule::zb_h1 ||
         kind == PipelineSchedule::zb_h2 || kind == PipelineSchedule::zbv;
}

PipelineSimulation pipeline_schedule_simulation(PipelineSchedule kind, int virtual_stages) {
  PipelineSimulation simulation;
  simulation.layout = pipeline_schedule_layout(kind, virtual_stages);
  simulation.nonblocking_sends = pipeline_schedule_needs_nonblocking_sends(kind);
  return simulation;
}

}  // namespace strata
