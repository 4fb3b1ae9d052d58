// simulate_pipeline (parallel/pipeline/pipeline_schedule.h): runs a program in lock-step without
// a device, checking the matching of transfers and the data flow of every (chunk, micro-batch).
#include <algorithm>
#include <cstddef>
#include <sstream>
#include <tuple>
#include <vector>

#include "model/core/error.h"
#include "parallel/pipeline/pipeline_schedule.h"

namespace strata {
namespace {

using Kind = PipelineOpKind;

// What has happened to one micro-batch of one chunk on one stage, for the data-flow checks.
struct MicroBatchState {
  bool input_received = false, forwarded = false, output_sent = false;
  bool grad_received = false, input_grad_done = false, weight_grad_done = false;
  bool grad_sent = false;
};

// A buffer queued by a non-blocking send: from `from` to `to`, tagged (kind, micro-batch, chunk
// on the receiver), ready at `time`.
struct Message {
  int from = 0, to = 0;
  bool activation = true;
  int micro_batch = 0, chunk = 0, time = 0;
};

class Simulator {
 public:
  Simulator(const PipelineProgram& program, int micro_batches, const PipelineSimulation& options)
      : program_(program),
        options_(options),
        stages_(static_cast<int>(program.size())),
        chunks_(options.layout.chunks),
        micro_batches_(micro_batches),
        next_(program.size(), 0),
        clock_(program.size(), 0),
        first_start_(program.size(), -1),
        head_sent_(program.size(), false),
        state_(program.size() * static_cast<std::size_t>(chunks_) *
               static_cast<std::size_t>(micro_batches)),
        held_(program.size(), 0),
        held_by_chunk_(program.size() * static_cast<std::size_t>(chunks_), 0) {
    stats_.busy_slots.assign(program.size(), 0);
    stats_.max_activations_held.assign(program.size(), 0);
    stats_.max_held_by_chunk.assign(program.size(),
                                    std::vector<int>(static_cast<std::size_t>(chunks_), 0));
    stats_.interior_idle_slots.assign(program.size(), 0);
    last_end_.assign(program.size(), 0);
  }

  PipelineStats run() {
    validate_ops();
    for (;;) {
      bool progress = false;
      for (int stage = 0; stage < stages_; ++stage)
        while (step(stage)) progress = true;
      if (finished()) break;
      // Under rendezvous in a chain this is unreachable (a blocked stage waits on a neighbour
      // that is done, caught in step(), or blocked on its other neighbour, ending at a pair
      // facing each other); rings, V's and queued sends can wait in a cycle.
      if (!progress) fail("pipeline schedule deadlocks: ", heads());
    }
    check_complete();
    for (int time : clock_) stats_.makespan = std::max(stats_.makespan, time);
    long busy = 0;
    for (int stage = 0; stage < stages_; ++stage) {
      const auto s = static_cast<std::size_t>(stage);
      busy += stats_.busy_slots[s];
      if (first_start_[s] >= 0)
        stats_.interior_idle_slots[s] = last_end_[s] - first_start_[s] - stats_.busy_slots[s];
    }
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
  MicroBatchState& mb(int stage, int chunk, int micro_batch) {
    return state_[(static_cast<std::size_t>(stage) * static_cast<std::size_t>(chunks_) +
                   static_cast<std::size_t>(chunk)) *
                      static_cast<std::size_t>(micro_batches_) +
                  static_cast<std::size_t>(micro_batch)];
  }
  int virtual_stages() const { return stages_ * chunks_; }
  int virtual_stage(int stage, int chunk) const {
    return pipeline_virtual_stage(options_.layout, stages_, stage, chunk);
  }
  // The (stage, chunk) a transfer of `op` on `stage` talks to; the stage may be out of range.
  StageChunk peer_of(int stage, const PipelineOp& op) const {
    const int peer = virtual_stage(stage, op.chunk) + pipeline_op_peer_offset(op.kind);
    if (peer < 0 || peer >= virtual_stages())
      return {stage + pipeline_op_peer_offset(op.kind), op.chunk};  // off the end, for messages
    return pipeline_stage_chunk(options_.layout, stages_, peer);
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
            (pipeline_op_is_exchange(op.kind) &&
             (op.recv_micro_batch < 0 || op.recv_micro_batch >= micro_batches_)))
          fail(prefix(), ": micro-batch out of range [0, ", micro_batches_, ")");
        if (op.chunk < 0 || op.chunk >= chunks_)
          fail(prefix(), ": chunk out of range [0, ", chunks_, ")");
        if (pipeline_op_peer_offset(op.kind) == 0) continue;
        const int peer = virtual_stage(stage, op.chunk) + pipeline_op_peer_offset(op.kind);
        if (peer < 0 || peer >= virtual_stages()) {
          if (chunks_ == 1)
            fail(prefix(), ": talks to stage ", peer, ", which does not exist (", stages_,
                 " stages)");
          fail(prefix(), ": talks to virtual stage ", peer, ", which does not exist (",
               virtual_stages(), " virtual stages)");
        }
        if (peer_of(stage, op).stage == stage)
          fail(prefix(), ": talks to its own rank (chunks of one rank hand over in place)");
      }
  }

  // Executes the head of `stage` if it can run now; false when it waits or the stage is done.
  bool step(int stage) {
    if (done(stage)) return false;
    const PipelineOp& op = head(stage);
    if (pipeline_op_peer_offset(op.kind) == 0) {
      compute(stage, op);
      ++next_[static_cast<std::size_t>(stage)];
      return true;
    }
    return options_.nonblocking_sends ? step_queued(stage, op) : step_rendezvous(stage, op);
  }

  bool step_rendezvous(int stage, const PipelineOp& op) {
    const int peer = peer_of(stage, op).stage;
    if (done(peer))
      fail("pipeline schedule: ", where(stage), " is unmatched: stage ", peer, " has no ops left");
    const PipelineOp& other = head(peer);
    if (pipeline_op_peer_offset(other.kind) == 0 || peer_of(peer, other).stage != stage)
      return false;  // peer busy elsewhere
    // Both heads talk to each other: under rendezvous they must be mirror images.
    if (!mirrors(stage, op, peer, other))
      fail("pipeline schedule: ", where(stage), " and ", where(peer),
           complementary(op.kind, other.kind)
               ? " carry different micro-batches or chunks"
               : " do not match (both would wait forever, or deliver the wrong buffer)");
    const auto s = static_cast<std::size_t>(stage), p = static_cast<std::size_t>(peer);
    clock_[s] = clock_[p] = std::max(clock_[s], clock_[p]);
    transfer(stage, op);
    transfer(peer, other);
    ++next_[s];
    ++next_[p];
    return true;
  }

  // Non-blocking sends: a send (or the send half of an exchange) completes at once and queues
  // its buffer; a receive completes once the buffer with its tag is queued.
  bool step_queued(int stage, const PipelineOp& op) {
    const auto s = static_cast<std::size_t>(stage);
    const StageChunk peer = peer_of(stage, op);
    const bool sends = op.kind != Kind::recv_activation && op.kind != Kind::recv_grad;
    const bool receives = op.kind != Kind::send_activation && op.kind != Kind::send_grad;
    const bool sends_activation =
        op.kind == Kind::send_activation || op.kind == Kind::send_activation_recv_grad;
    if (sends && !head_sent_[s]) {
      send_half(stage, op);
      queue_.push_back(
          {stage, peer.stage, sends_activation, op.micro_batch, peer.chunk, clock_[s]});
      head_sent_[s] = true;
    }
    if (receives) {
      const int micro_batch =
          pipeline_op_is_exchange(op.kind) ? op.recv_micro_batch : op.micro_batch;
      const bool activation =
          op.kind == Kind::recv_activation || op.kind == Kind::send_grad_recv_activation;
      const auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Message& m) {
        return m.from == peer.stage && m.to == stage && m.activation == activation &&
               m.micro_batch == micro_batch && m.chunk == op.chunk;
      });
      if (it == queue_.end()) return false;  // not sent yet
      clock_[s] = std::max(clock_[s], it->time);
      queue_.erase(it);
      receive_half(stage, op);
    }
    head_sent_[s] = false;
    ++next_[s];
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
  bool mirrors(int stage, const PipelineOp& a, int peer, const PipelineOp& b) const {
    if (!complementary(a.kind, b.kind)) return false;
    if (peer_of(stage, a).chunk != b.chunk || peer_of(peer, b).chunk != a.chunk) return false;
    if (pipeline_op_is_exchange(a.kind))
      return a.micro_batch == b.recv_micro_batch && a.recv_micro_batch == b.micro_batch;
    return a.micro_batch == b.micro_batch;
  }

  // Whether the neighbouring virtual stage (offset -1 or +1) of (stage, chunk) is on this rank,
  // where buffers are handed over in place; false at the ends of the model.
  bool local_neighbour(int stage, int chunk, int offset, StageChunk* neighbour) const {
    const int other = virtual_stage(stage, chunk) + offset;
    if (other < 0 || other >= virtual_stages()) return false;
    *neighbour = pipeline_stage_chunk(options_.layout, stages_, other);
    return neighbour->stage == stage;
  }

  int cost(Kind kind) const {
    switch (kind) {
      case Kind::forward:
        return options_.costs.forward;
      case Kind::backward_input:
        return options_.costs.backward_input;
      case Kind::backward_weight:
        return options_.costs.backward_weight;
      default:
        return options_.costs.backward_input + options_.costs.backward_weight;
    }
  }

  void compute(int stage, const PipelineOp& op) {
    MicroBatchState& state = mb(stage, op.chunk, op.micro_batch);
    const int here = virtual_stage(stage, op.chunk);
    const bool first = here == 0, last = here == virtual_stages() - 1;
    const auto s = static_cast<std::size_t>(stage);
    const auto require = [&](bool condition, const char* what) {
      if (!condition) fail("pipeline schedule: ", where(stage), ": ", what);
    };
    StageChunk neighbour;
    if (op.kind == Kind::forward) {
      require(!state.forwarded, "forwarded twice");
      if (!first) {
        const bool input_here = local_neighbour(stage, op.chunk, -1, &neighbour)
                                    ? mb(stage, neighbour.chunk, op.micro_batch).forwarded
                                    : state.input_received;
        require(input_here, "its input activation was not received");
      }
      state.forwarded = true;
      stats_.max_activations_held[s] = std::max(stats_.max_activations_held[s], ++held_[s]);
      int& by_chunk = stats_.max_held_by_chunk[s][static_cast<std::size_t>(op.chunk)];
      by_chunk = std::max(by_chunk, ++chunk_held(s, op.chunk));
    } else if (op.kind == Kind::backward_weight) {
      require(!state.weight_grad_done, "weight gradient computed twice");
      require(state.input_grad_done, "before its input gradient (backward_input)");
      state.weight_grad_done = true;
      --held_[s];
      --chunk_held(s, op.chunk);
    } else {  // backward or backward_input
      require(!state.input_grad_done, "backwarded twice");
      require(state.forwarded, "before its forward");
      if (!last) {
        const bool grad_here = local_neighbour(stage, op.chunk, +1, &neighbour)
                                   ? mb(stage, neighbour.chunk, op.micro_batch).input_grad_done
                                   : state.grad_received;
        require(grad_here, "its output gradient was not received");
      }
      state.input_grad_done = true;
      if (op.kind == Kind::backward) {
        state.weight_grad_done = true;
        --held_[s];
        --chunk_held(s, op.chunk);
      }
    }
    if (first_start_[s] < 0) first_start_[s] = clock_[s];
    clock_[s] += cost(op.kind);
    last_end_[s] = clock_[s];
    stats_.busy_slots[s] += cost(op.kind);
  }

  void require_at(int stage, bool condition, const char* what) const {
    if (!condition) fail("pipeline schedule: ", where(stage), ": ", what);
  }
  void send_half(int stage, const PipelineOp& op) {
    MicroBatchState& state = mb(stage, op.chunk, op.micro_batch);
    if (op.kind == Kind::send_activation || op.kind == Kind::send_activation_recv_grad) {
      require_at(stage, state.forwarded, "sends an activation before its forward");
      require_at(stage, !state.output_sent, "sends the activation twice");
      state.output_sent = true;
    } else {
      require_at(stage, state.input_grad_done, "sends a gradient before its backward");
      require_at(stage, !state.grad_sent, "sends the gradient twice");
      state.grad_sent = true;
    }
  }
  void receive_half(int stage, const PipelineOp& op) {
    const int micro_batch = pipeline_op_is_exchange(op.kind) ? op.recv_micro_batch : op.micro_batch;
    MicroBatchState& state = mb(stage, op.chunk, micro_batch);
    if (op.kind == Kind::recv_activation || op.kind == Kind::send_grad_recv_activation) {
      require_at(stage, !state.input_received, "receives the input activation twice");
      state.input_received = true;
    } else {
      require_at(stage, !state.grad_received, "receives the output gradient twice");
      state.grad_received = true;
    }
  }
  void transfer(int stage, const PipelineOp& op) {
    if (op.kind != Kind::recv_activation && op.kind != Kind::recv_grad) send_half(stage, op);
    if (op.kind != Kind::send_activation && op.kind != Kind::send_grad) receive_half(stage, op);
  }

  // Forward needs its received input, backward its received gradient, and every receive was
  // matched by a send; so with these checks every buffer that has to cross a rank boundary did.
  void check_complete() {
    if (!queue_.empty()) {
      const Message& m = queue_.front();
      fail("pipeline schedule: stage ", m.from, " sends the ",
           m.activation ? "activation" : "gradient", " of micro-batch ", m.micro_batch,
           " to stage ", m.to, " chunk ", m.chunk, ", which never receives it");
    }
    for (int stage = 0; stage < stages_; ++stage)
      for (int chunk = 0; chunk < chunks_; ++chunk)
        for (int micro_batch = 0; micro_batch < micro_batches_; ++micro_batch) {
          const MicroBatchState& state = mb(stage, chunk, micro_batch);
          StageChunk neighbour;
          const bool sends_up = virtual_stage(stage, chunk) + 1 < virtual_stages() &&
                                !local_neighbour(stage, chunk, +1, &neighbour);
          const char* missing = nullptr;
          if (!state.forwarded)
            missing = "forward";
          else if (!state.input_grad_done)
            missing = "backward";
          else if (!state.weight_grad_done)
            missing = "backward_weight";
          else if (sends_up && !state.output_sent)
            missing = "send of the activation";
          if (missing == nullptr) continue;
          if (chunks_ == 1)
            fail("pipeline schedule: stage ", stage, " never runs the ", missing,
                 " of micro-batch ", micro_batch);
          fail("pipeline schedule: stage ", stage, " never runs the ", missing, " of micro-batch ",
               micro_batch, " chunk ", chunk);
        }
  }

  const PipelineProgram& program_;
  const PipelineSimulation& options_;
  int stages_;
  int chunks_;
  int micro_batches_;
  std::vector<std::size_t> next_;       // per stage: index of its head op
  std::vector<int> clock_;              // per stage: time its head op may start
  std::vector<int> first_start_;        // per stage: start of its first compute, -1 before
  std::vector<int> last_end_;           // per stage: end of its latest compute
  std::vector<bool> head_sent_;         // per stage: the send half of its head already queued
  std::vector<MicroBatchState> state_;  // [stage][chunk][micro-batch]
  std::vector<int> held_;               // per stage: (chunk, micro-batch) forwarded, W not yet run
  std::vector<int> held_by_chunk_;      // [stage][chunk]: the same per chunk
  int& chunk_held(std::size_t stage, int chunk) {
    return held_by_chunk_[stage * static_cast<std::size_t>(chunks_) +
                          static_cast<std::size_t>(chunk)];
  }
  std::vector<Message> queue_;  // non-blocking sends not yet received
  PipelineStats stats_;
};

}  // namespace

PipelineStats simulate_pipeline(const PipelineProgram& program, int micro_batches,
                                const PipelineSimulation& simulation) {
  if (program.empty()) fail("pipeline schedule: no stages");
  if (micro_batches < 1)
    fail("pipeline schedule: micro_batches must be at least 1, got ", micro_batches);
  if (simulation.layout.chunks < 1)
    fail("pipeline schedule: chunks must be at least 1, got ", simulation.layout.chunks);
  return Simulator(program, micro_batches, simulation).run();
}

PipelineStats simulate_pipeline(const PipelineProgram& program, int micro_batches) {
  // Today's cost model: forward and fused backward one slot each.
  PipelineSimulation simulation;
  simulation.costs.backward_weight = 0;
  return simulate_pipeline(program, micro_batches, simulation);
}

}  // namespace strata
