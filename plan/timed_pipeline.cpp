#include "plan/timed_pipeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "model/core/error.h"

namespace strata {

double shared_speed(const CoreSharing& sharing, double busy) {
  if (sharing.cores <= 0 || busy <= 0) return 1;
  const double waiting = std::max(0.0, sharing.ranks - busy);
  return std::min(1.0, sharing.cores / (busy * sharing.threads + sharing.waiting_share * waiting));
}

namespace {

enum class Activity { ready, computing, transferring, done };

double compute_seconds(const PipelineOp& op, const StageDurations& d) {
  switch (op.kind) {
    case PipelineOpKind::forward:
      return d.forward;
    case PipelineOpKind::backward_input:
      return d.backward - d.backward_weight;
    case PipelineOpKind::backward_weight:
      return d.backward_weight;
    default:
      return d.backward;
  }
}

// A queued message: (sender, receiver, gradient?, micro-batch, receiving chunk), the executor's
// channel and tag.
using MessageKey = std::tuple<std::size_t, std::size_t, bool, int, int>;

// Whether an op's send or receive half carries a gradient (else an activation).
bool carries_gradient(PipelineOpKind kind, bool send_half) {
  switch (kind) {
    case PipelineOpKind::send_grad:
    case PipelineOpKind::recv_grad:
      return true;
    case PipelineOpKind::send_activation_recv_grad:
      return !send_half;
    case PipelineOpKind::send_grad_recv_activation:
      return send_half;
    default:
      return false;
  }
}

}  // namespace

TimedPipeline run_pipeline_clock(const PipelineProgram& program,
                                 const std::vector<StageDurations>& durations,
                                 const CoreSharing& sharing, bool nonblocking_sends) {
  std::vector<std::vector<StageDurations>> by_chunk;
  for (const StageDurations& d : durations) by_chunk.push_back({d});
  return run_pipeline_clock(program, PipelineLayout{}, by_chunk, sharing, nonblocking_sends);
}

TimedPipeline run_pipeline_clock(const PipelineProgram& program, const PipelineLayout& layout,
                                 const std::vector<std::vector<StageDurations>>& durations,
                                 const CoreSharing& sharing, bool nonblocking_sends) {
  const std::size_t stages = program.size();
  const int virtual_stages = static_cast<int>(stages) * layout.chunks;
  STRATA_CHECK(durations.size() == stages, "one duration per pipeline stage");
  for (std::size_t s = 0; s < stages; ++s) {
    STRATA_CHECK(static_cast<int>(durations[s].size()) == layout.chunks, "pipeline clock: stage ",
                 s, " has durations for ", durations[s].size(), " chunks, the layout ",
                 layout.chunks);
    for (const PipelineOp& op : program[s])
      STRATA_CHECK(op.chunk >= 0 && op.chunk < layout.chunks, "pipeline clock: stage ", s, "'s ",
                   to_string(op), " names a chunk of ", layout.chunks);
  }
  // The virtual stage an op of `stage` talks to, and the durations of the lower of the two (whose
  // `message` is the one between them).
  struct Peer {
    std::size_t stage = 0;
    int chunk = 0;
    double message = 0;
  };
  const auto peer_of = [&](std::size_t stage, const PipelineOp& op) {
    const int here =
        pipeline_virtual_stage(layout, static_cast<int>(stages), static_cast<int>(stage), op.chunk);
    const int there = here + pipeline_op_peer_offset(op.kind);
    STRATA_CHECK(there >= 0 && there < virtual_stages, "pipeline clock: stage ", stage, "'s ",
                 to_string(op), " talks to a virtual stage that does not exist");
    const StageChunk peer = pipeline_stage_chunk(layout, static_cast<int>(stages), there);
    const StageChunk lower =
        pipeline_stage_chunk(layout, static_cast<int>(stages), std::min(here, there));
    STRATA_CHECK(peer.stage != static_cast<int>(stage), "pipeline clock: stage ", stage, "'s ",
                 to_string(op), " talks to its own rank");
    return Peer{
        static_cast<std::size_t>(peer.stage), peer.chunk,
        durations[static_cast<std::size_t>(lower.stage)][static_cast<std::size_t>(lower.chunk)]
            .message};
  };
  std::map<MessageKey, double> arrivals;  // queued messages: when each reaches its receiver
  std::vector<bool> sent(stages, false);  // queued exchanges: the send half is done
  std::vector<std::size_t> next(stages, 0);
  std::vector<Activity> activity(stages, Activity::ready);
  std::vector<double> remaining(stages, 0);  // computing: own-speed seconds; transferring: seconds
  std::vector<double> started(stages, 0);
  TimedPipeline t;
  t.finish.assign(stages, 0.0);
  t.busy.assign(stages, 0.0);
  double now = 0;

  // Starts what can start at `now`: passes at once, transfers when the mirror is waiting.
  const auto start_ops = [&] {
    for (bool again = true; again;) {
      again = false;
      for (std::size_t s = 0; s < stages; ++s) {
        if (activity[s] != Activity::ready) continue;
        if (next[s] >= program[s].size()) {
          activity[s] = Activity::done;
          t.finish[s] = now;
          continue;
        }
        const PipelineOp& op = program[s][next[s]];
        const int offset = pipeline_op_peer_offset(op.kind);
        if (offset == 0) {
          activity[s] = Activity::computing;
          remaining[s] = compute_seconds(op, durations[s][static_cast<std::size_t>(op.chunk)]);
          started[s] = now;
          again = true;
          continue;
        }
        const Peer peer = peer_of(s, op);
        if (nonblocking_sends) {
          const bool exchange = pipeline_op_is_exchange(op.kind);
          const bool sends = exchange || op.kind == PipelineOpKind::send_activation ||
                             op.kind == PipelineOpKind::send_grad;
          if (sends && !sent[s]) {  // the send half: queued, arriving a message time later
            arrivals[{s, peer.stage, carries_gradient(op.kind, true), op.micro_batch, peer.chunk}] =
                now + peer.message;
            sent[s] = true;
            again = true;
          }
          if (sends && !exchange) {
            sent[s] = false;
            ++next[s];
            continue;
          }
          const int mb = exchange ? op.recv_micro_batch : op.micro_batch;
          const auto message =
              arrivals.find({peer.stage, s, carries_gradient(op.kind, false), mb, op.chunk});
          if (message == arrivals.end()) continue;  // not sent yet
          activity[s] = Activity::transferring;
          remaining[s] = std::max(0.0, message->second - now);
          arrivals.erase(message);
          sent[s] = false;
          again = true;
          continue;
        }
        // The matching contract makes the peer's next op towards this virtual stage the mirror.
        const std::size_t other = peer.stage;
        if (activity[other] != Activity::ready || next[other] >= program[other].size()) continue;
        const PipelineOp& mirror = program[other][next[other]];
        if (pipeline_op_peer_offset(mirror.kind) != -offset || mirror.chunk != peer.chunk ||
            peer_of(other, mirror).stage != s)
          continue;
        const double seconds = peer.message;
        for (std::size_t x : {s, other}) {
          activity[x] = Activity::transferring;
          remaining[x] = seconds;
        }
        again = true;
      }
    }
  };

  start_ops();
  while (true) {
    int computing = 0;
    for (Activity a : activity) computing += a == Activity::computing;
    const double speed = shared_speed(sharing, computing * sharing.ranks_per_stage);
    double step = std::numeric_limits<double>::infinity();
    for (std::size_t s = 0; s < stages; ++s) {
      if (activity[s] == Activity::computing) step = std::min(step, remaining[s] / speed);
      if (activity[s] == Activity::transferring) step = std::min(step, remaining[s]);
    }
    if (step == std::numeric_limits<double>::infinity()) break;  // nothing running
    now += step;
    for (std::size_t s = 0; s < stages; ++s) {
      if (activity[s] == Activity::computing) remaining[s] -= step * speed;
      if (activity[s] == Activity::transferring) remaining[s] -= step;
      if ((activity[s] == Activity::computing || activity[s] == Activity::transferring) &&
          remaining[s] <= 1e-12 * std::max(1.0, now)) {
        if (activity[s] == Activity::computing) t.busy[s] += now - started[s];
        activity[s] = Activity::ready;
        ++next[s];
      }
    }
    start_ops();
  }
  double busy = 0;
  for (std::size_t s = 0; s < stages; ++s) {
    if (activity[s] != Activity::done)
      fail("pipeline clock: stage ", s, " deadlocked at ", to_string(program[s][next[s]]));
    t.makespan = std::max(t.makespan, t.finish[s]);
    busy += t.busy[s];
  }
  t.bubble_fraction = t.makespan > 0 ? 1 - busy / (static_cast<double>(stages) * t.makespan) : 0;
  return t;
}

}  // namespace strata
