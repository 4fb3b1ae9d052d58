#include "parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <cstddef>
#include <sstream>

#include "model/core/error.h"

namespace strata {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (const auto kind = kPipelineScheduleChoices.find(name)) return *kind;
  fail("unknown pipeline schedule '", name, "' (expected ", kPipelineScheduleChoices.list(), ")");
}

std::string pipeline_schedule_name(PipelineSchedule kind) {
  return std::string(kPipelineScheduleChoices.word(kind));
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
  }
  return "?";
}

bool is_exchange(PipelineOpKind kind) {
  return kind == PipelineOpKind::send_activation_recv_grad ||
         kind == PipelineOpKind::send_grad_recv_activation;
}

}  // namespace

std::string to_string(const PipelineOp& op) {
  std::ostringstream text;
  text << kind_name(op.kind);
  if (is_exchange(op.kind))
    text << "(send mb " << op.micro_batch << ", recv mb " << op.recv_micro_batch << ")";
  else
    text << "(mb " << op.micro_batch << ")";
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
      return 0;
  }
  return 0;
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

}  // namespace

PipelineProgram make_pipeline_schedule(PipelineSchedule kind, int stages, int micro_batches) {
  if (stages < 1) fail("pipeline schedule: stages must be at least 1, got ", stages);
  if (micro_batches < 1)
    fail("pipeline schedule: micro_batches must be at least 1, got ", micro_batches);
  PipelineProgram program;
  program.reserve(static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage)
    program.push_back(kind == PipelineSchedule::gpipe
                          ? gpipe_stage(stage, stages, micro_batches)
                          : one_f_one_b_stage(stage, stages, micro_batches));
  return program;
}

// ---------------------------------------------------------------------------------------------
// Simulator

namespace {

// What has happened to one micro-batch on one stage, for the data-flow checks.
struct MicroBatchState {
  bool input_received = false, forwarded = false, output_sent = false;
  bool grad_received = false, backwarded = false, grad_sent = false;
};

class Simulator {
 public:
  Simulator(const PipelineProgram& program, int micro_batches)
      : program_(program),
        stages_(static_cast<int>(program.size())),
        micro_batches_(micro_batches),
        next_(program.size(), 0),
        clock_(program.size(), 0),
        state_(program.size(),
               std::vector<MicroBatchState>(static_cast<std::size_t>(micro_batches))) {
    stats_.busy_slots.assign(program.size(), 0);
    stats_.max_activations_held.assign(program.size(), 0);
    held_.assign(program.size(), 0);
  }

  PipelineStats run() {
    validate_ops();
    for (;;) {
      bool progress = false;
      for (int stage = 0; stage < stages_; ++stage)
        while (step(stage)) progress = true;
      if (finished()) break;
      // Unreachable in a chain (a blocked stage waits on a neighbour that is either done, caught
      // in step(), or blocked on its other neighbour, ending at a pair facing each other), kept so
      // a future non-chain schedule still cannot loop forever.
      if (!progress) fail("pipeline schedule deadlocks: ", heads());
    }
    check_complete();
    for (int time : clock_) stats_.makespan = std::max(stats_.makespan, time);
    long busy = 0;
    for (int slots : stats_.busy_slots) busy += slots;
    stats_.bubble_fraction =
        1.0 - static_cast<double>(busy) / (static_cast<double>(stages_) * stats_.makespan);
    return stats_;
  }

 private:
  const PipelineOp& op_at(int stage, std::size_t index) const {
    return program_[static_cast<std::size_t>(stage)][index];
  }
  bool done(int stage) const {
    return next_[static_cast<std::size_t>(stage)] ==
           program_[static_cast<std::size_t>(stage)].size();
  }
  const PipelineOp& head(int stage) const {
    return op_at(stage, next_[static_cast<std::size_t>(stage)]);
  }
  bool finished() const {
    for (int stage = 0; stage < stages_; ++stage)
      if (!done(stage)) return false;
    return true;
  }
  std::string where(int stage) const {
    std::ostringstream text;
    text << "stage " << stage << " op " << next_[static_cast<std::size_t>(stage)] << " ("
         << to_string(head(stage)) << ")";
    return text.str();
  }
  std::string heads() const {
    std::string text;
    for (int stage = 0; stage < stages_; ++stage)
      if (!done(stage)) text += (text.empty() ? "" : "; ") + where(stage);
    return text;
  }
  MicroBatchState& mb(int stage, int micro_batch) {
    return state_[static_cast<std::size_t>(stage)][static_cast<std::size_t>(micro_batch)];
  }

  // Ranges and peers are checked up front so the run below can index freely.
  void validate_ops() const {
    for (int stage = 0; stage < stages_; ++stage)
      for (std::size_t i = 0; i < program_[static_cast<std::size_t>(stage)].size(); ++i) {
        const PipelineOp& op = op_at(stage, i);
        const auto prefix = [&] {
          std::ostringstream text;
          text << "pipeline schedule: stage " << stage << " op " << i << " (" << to_string(op)
               << ")";
          return text.str();
        };
        if (op.micro_batch < 0 || op.micro_batch >= micro_batches_ ||
            (is_exchange(op.kind) &&
             (op.recv_micro_batch < 0 || op.recv_micro_batch >= micro_batches_)))
          fail(prefix(), ": micro-batch out of range [0, ", micro_batches_, ")");
        const int peer = stage + pipeline_op_peer_offset(op.kind);
        if (peer < 0 || peer >= stages_)
          fail(prefix(), ": talks to stage ", peer, ", which does not exist (", stages_,
               " stages)");
      }
  }

  // Executes the head of `stage` if it can run now; false when it waits or the stage is done.
  bool step(int stage) {
    if (done(stage)) return false;
    const PipelineOp& op = head(stage);
    const int offset = pipeline_op_peer_offset(op.kind);
    if (offset == 0) {
      compute(stage, op);
      ++next_[static_cast<std::size_t>(stage)];
      return true;
    }
    const int peer = stage + offset;
    if (done(peer))
      fail("pipeline schedule: ", where(stage), " is unmatched: stage ", peer, " has no ops left");
    const PipelineOp& other = head(peer);
    if (peer + pipeline_op_peer_offset(other.kind) != stage) return false;  // peer busy elsewhere
    // Both heads talk to each other: under rendezvous semantics they must be mirror images.
    if (!mirrors(op, other))
      fail("pipeline schedule: ", where(stage), " and ", where(peer),
           complementary(op.kind, other.kind)
               ? " carry different micro-batches"
               : " do not match (both would wait forever, or deliver the wrong buffer)");
    const int time =
        std::max(clock_[static_cast<std::size_t>(stage)], clock_[static_cast<std::size_t>(peer)]);
    clock_[static_cast<std::size_t>(stage)] = clock_[static_cast<std::size_t>(peer)] = time;
    transfer(stage, op);
    transfer(peer, other);
    ++next_[static_cast<std::size_t>(stage)];
    ++next_[static_cast<std::size_t>(peer)];
    return true;
  }

  static bool complementary(Kind a, Kind b) {
    const auto one_way = [](Kind x, Kind y) {
      return (x == Kind::send_activation && y == Kind::recv_activation) ||
             (x == Kind::send_grad && y == Kind::recv_grad) ||
             (x == Kind::send_activation_recv_grad && y == Kind::send_grad_recv_activation);
    };
    return one_way(a, b) || one_way(b, a);
  }
  static bool mirrors(const PipelineOp& a, const PipelineOp& b) {
    if (!complementary(a.kind, b.kind)) return false;
    if (is_exchange(a.kind))
      return a.micro_batch == b.recv_micro_batch && a.recv_micro_batch == b.micro_batch;
    return a.micro_batch == b.micro_batch;
  }

  void compute(int stage, const PipelineOp& op) {
    MicroBatchState& state = mb(stage, op.micro_batch);
    const bool first = stage == 0, last = stage == stages_ - 1;
    const auto s = static_cast<std::size_t>(stage);
    if (op.kind == Kind::forward) {
      if (state.forwarded) fail("pipeline schedule: ", where(stage), ": forwarded twice");
      if (!first && !state.input_received)
        fail("pipeline schedule: ", where(stage), ": its input activation was not received");
      state.forwarded = true;
      stats_.max_activations_held[s] = std::max(stats_.max_activations_held[s], ++held_[s]);
    } else {
      if (state.backwarded) fail("pipeline schedule: ", where(stage), ": backwarded twice");
      if (!state.forwarded) fail("pipeline schedule: ", where(stage), ": before its forward");
      if (!last && !state.grad_received)
        fail("pipeline schedule: ", where(stage), ": its output gradient was not received");
      state.backwarded = true;
      --held_[s];
    }
    ++clock_[s];
    ++stats_.busy_slots[s];
  }

  void transfer(int stage, const PipelineOp& op) {
    const auto require = [&](bool condition, const char* what) {
      if (!condition) fail("pipeline schedule: ", where(stage), ": ", what);
    };
    const auto receive_input = [&](int micro_batch) {
      require(!mb(stage, micro_batch).input_received, "receives the input activation twice");
      mb(stage, micro_batch).input_received = true;
    };
    const auto receive_grad = [&](int micro_batch) {
      require(!mb(stage, micro_batch).grad_received, "receives the output gradient twice");
      mb(stage, micro_batch).grad_received = true;
    };
    const auto send_output = [&](int micro_batch) {
      MicroBatchState& state = mb(stage, micro_batch);
      require(state.forwarded, "sends an activation before its forward");
      require(!state.output_sent, "sends the activation twice");
      state.output_sent = true;
    };
    const auto send_grad = [&](int micro_batch) {
      MicroBatchState& state = mb(stage, micro_batch);
      require(state.backwarded, "sends a gradient before its backward");
      require(!state.grad_sent, "sends the gradient twice");
      state.grad_sent = true;
    };
    switch (op.kind) {
      case Kind::recv_activation:
        receive_input(op.micro_batch);
        break;
      case Kind::send_activation:
        send_output(op.micro_batch);
        break;
      case Kind::recv_grad:
        receive_grad(op.micro_batch);
        break;
      case Kind::send_grad:
        send_grad(op.micro_batch);
        break;
      case Kind::send_activation_recv_grad:
        send_output(op.micro_batch);
        receive_grad(op.recv_micro_batch);
        break;
      case Kind::send_grad_recv_activation:
        send_grad(op.micro_batch);
        receive_input(op.recv_micro_batch);
        break;
      case Kind::forward:
      case Kind::backward:
        STRATA_CHECK(false, "compute op in transfer()");
    }
  }

  // Forward needs its received input, backward its received gradient, and every receive was
  // matched by a send; so with these checks every buffer that has to cross a stage boundary did.
  void check_complete() {
    for (int stage = 0; stage < stages_; ++stage)
      for (int micro_batch = 0; micro_batch < micro_batches_; ++micro_batch) {
        const MicroBatchState& state = mb(stage, micro_batch);
        const char* missing = nullptr;
        if (!state.forwarded)
          missing = "forward";
        else if (!state.backwarded)
          missing = "backward";
        else if (stage + 1 < stages_ && !state.output_sent)
          missing = "send of the activation";
        if (missing != nullptr)
          fail("pipeline schedule: stage ", stage, " never runs the ", missing, " of micro-batch ",
               micro_batch);
      }
  }

  const PipelineProgram& program_;
  int stages_;
  int micro_batches_;
  std::vector<std::size_t> next_;  // per stage: index of its head op
  std::vector<int> clock_;         // per stage: time its head op may start
  std::vector<std::vector<MicroBatchState>> state_;
  std::vector<int> held_;  // per stage: micro-batches forwarded, not yet backwarded
  PipelineStats stats_;
};

}  // namespace

PipelineStats simulate_pipeline(const PipelineProgram& program, int micro_batches) {
  if (program.empty()) fail("pipeline schedule: no stages");
  if (micro_batches < 1)
    fail("pipeline schedule: micro_batches must be at least 1, got ", micro_batches);
  return Simulator(program, micro_batches).run();
}

}  // namespace strata
