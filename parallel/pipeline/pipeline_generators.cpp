#include "parallel/pipeline/pipeline_generators.h"

#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include "model/core/error.h"

namespace strata {
namespace {

using Kind = PipelineOpKind;

// Surrounds each compute op of `order` (one list per rank) with the single transfers its data
// needs: a forward receives its input from the previous virtual stage and sends its output to the
// next; a B (or fused backward) receives the output gradient from the next and sends the input
// gradient to the previous. Neighbours on the same rank (the V's turn) hand over in place.
PipelineProgram with_transfers(const PipelineProgram& order, const PipelineLayout& layout) {
  const int stages = static_cast<int>(order.size());
  const int virtual_stages = stages * layout.chunks;
  PipelineProgram program(order.size());
  for (int stage = 0; stage < stages; ++stage) {
    auto& ops = program[static_cast<std::size_t>(stage)];
    const auto remote = [&](int virtual_stage) {
      return virtual_stage >= 0 && virtual_stage < virtual_stages &&
             pipeline_stage_chunk(layout, stages, virtual_stage).stage != stage;
    };
    for (const PipelineOp& op : order[static_cast<std::size_t>(stage)]) {
      const int here = pipeline_virtual_stage(layout, stages, stage, op.chunk);
      const bool from_previous = remote(here - 1), from_next = remote(here + 1);
      const PipelineOp recv_activation{Kind::recv_activation, op.micro_batch, -1, op.chunk};
      const PipelineOp send_activation{Kind::send_activation, op.micro_batch, -1, op.chunk};
      const PipelineOp recv_grad{Kind::recv_grad, op.micro_batch, -1, op.chunk};
      const PipelineOp send_grad{Kind::send_grad, op.micro_batch, -1, op.chunk};
      if (op.kind == Kind::forward) {
        if (from_previous) ops.push_back(recv_activation);
        ops.push_back(op);
        if (from_next) ops.push_back(send_activation);
      } else if (op.kind == Kind::backward || op.kind == Kind::backward_input) {
        if (from_next) ops.push_back(recv_grad);
        ops.push_back(op);
        if (from_previous) ops.push_back(send_grad);
      } else {
        ops.push_back(op);
      }
    }
  }
  return program;
}

}  // namespace

PipelineProgram interleaved_program(int stages, int micro_batches, int chunks) {
  // Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward of a rank is
  // micro-batch (k / pv)·p + k % p of chunk (k % pv) / p; the k-th backward is the same with the
  // chunk reversed, so a group of p micro-batches climbs all chunks before the next group.
  const int per_group = stages * chunks, total = micro_batches * chunks;
  const auto micro_batch_of = [&](int k) { return (k / per_group) * stages + k % stages; };
  const auto chunk_of = [&](int k) { return (k % per_group) / stages; };
  PipelineProgram order(static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage) {
    // Rank s must run 2(p - s - 1) forwards for the first gradient to come back through the ring,
    // plus (v - 1)p for the earlier chunks of that group; with m == p everything is warm-up.
    const int warmup = micro_batches == stages
                           ? total
                           : std::min(2 * (stages - stage - 1) + (chunks - 1) * stages, total);
    auto& ops = order[static_cast<std::size_t>(stage)];
    const auto forward = [&](int k) {
      ops.push_back({Kind::forward, micro_batch_of(k), -1, chunk_of(k)});
    };
    const auto backward = [&](int k) {
      ops.push_back({Kind::backward, micro_batch_of(k), -1, chunks - 1 - chunk_of(k)});
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return with_transfers(order, PipelineLayout{chunks, ChunkPlacement::looped});
}

namespace {

// The bookkeeping of a list schedule in unit time slots over `units` virtual stages (the units of
// compute) on `ranks` ranks: when each (unit, micro-batch)'s F and B ended, and per rank the op
// order so far, the micro-batches held (forwarded, not through W) and the W's waiting, oldest
// first. The schedulers below differ only in which ready op a free rank picks.
class UnitSlots {
 public:
  UnitSlots(int units, int ranks, int micro_batches)
      : units_(units),
        micro_batches_(micro_batches),
        forward_end_(index(units, 0), kNotYet),
        backward_end_(index(units, 0), kNotYet),
        held_(static_cast<std::size_t>(ranks), 0),
        pending_weight_(static_cast<std::size_t>(ranks)),
        order_(static_cast<std::size_t>(ranks)),
        remaining_(3L * units * micro_batches) {}

  bool finished() const { return remaining_ == 0; }
  int held(int rank) const { return held_[static_cast<std::size_t>(rank)]; }
  // F of `mb` on `unit` may start at `slot`: its input has arrived (unit 0 reads the batch).
  bool forward_ready(int unit, int mb, int slot) const {
    return unit == 0 || done_by(forward_end_[index(unit - 1, mb)], slot);
  }
  // B of `mb` on `unit` may start: its forward ran and its output gradient has arrived.
  bool backward_ready(int unit, int mb, int slot) const {
    return done_by(forward_end_[index(unit, mb)], slot) &&
           (unit + 1 == units_ || done_by(backward_end_[index(unit + 1, mb)], slot));
  }
  // Runs an op on `rank` in `slot` (chunk: the unit's place on the rank).
  void forward(int rank, int unit, int chunk, int mb, int slot) {
    run(rank, {Kind::forward, mb, -1, chunk});
    forward_end_[index(unit, mb)] = slot + 1;
    ++held_[static_cast<std::size_t>(rank)];
  }
  void backward_input(int rank, int unit, int chunk, int mb, int slot) {
    run(rank, {Kind::backward_input, mb, -1, chunk});
    pending_weight_[static_cast<std::size_t>(rank)].push_back(
        {Kind::backward_weight, mb, -1, chunk});
    backward_end_[index(unit, mb)] = slot + 1;
  }
  // Runs the rank's oldest waiting W; false when none waits.
  bool weight(int rank) {
    auto& pending = pending_weight_[static_cast<std::size_t>(rank)];
    if (pending.empty()) return false;
    run(rank, pending.front());
    pending.pop_front();
    --held_[static_cast<std::size_t>(rank)];
    return true;
  }
  PipelineProgram&& order() { return std::move(order_); }

 private:
  static constexpr int kNotYet = -1;
  static bool done_by(int end, int slot) { return end != kNotYet && end <= slot; }
  std::size_t index(int unit, int mb) const {
    return static_cast<std::size_t>(unit) * static_cast<std::size_t>(micro_batches_) +
           static_cast<std::size_t>(mb);
  }
  void run(int rank, const PipelineOp& op) {
    order_[static_cast<std::size_t>(rank)].push_back(op);
    --remaining_;
  }

  int units_, micro_batches_;
  std::vector<int> forward_end_, backward_end_;
  std::vector<int> held_;
  std::vector<std::deque<PipelineOp>> pending_weight_;
  PipelineProgram order_;
  long remaining_;
};

}  // namespace

PipelineProgram zb_h1_program(const PipelineProgram& one_f_one_b, int micro_batches, int max_held) {
  const int stages = static_cast<int>(one_f_one_b.size());
  // Each stage's forwards and backwards in 1F1B's order.
  std::vector<std::vector<PipelineOp>> compute(static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage)
    for (const PipelineOp& op : one_f_one_b[static_cast<std::size_t>(stage)])
      if (op.kind == Kind::forward || op.kind == Kind::backward)
        compute[static_cast<std::size_t>(stage)].push_back(op);
  std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
  UnitSlots slots(stages, stages, micro_batches);
  for (int slot = 0; !slots.finished(); ++slot) {
    bool ran = false;
    for (int stage = 0; stage < stages; ++stage) {
      const auto s = static_cast<std::size_t>(stage);
      if (next[s] < compute[s].size()) {
        const PipelineOp& op = compute[s][next[s]];
        const int mb = op.micro_batch;
        if (op.kind == Kind::forward && slots.held(stage) < max_held &&
            slots.forward_ready(stage, mb, slot)) {
          slots.forward(stage, stage, 0, mb, slot);
          ++next[s];
          ran = true;
          continue;
        }
        if (op.kind == Kind::backward && slots.backward_ready(stage, mb, slot)) {
          slots.backward_input(stage, stage, 0, mb, slot);
          ++next[s];
          ran = true;
          continue;
        }
      }
      ran = slots.weight(stage) || ran;  // W fills what would be a bubble
    }
    STRATA_CHECK(ran || slots.finished(), "ZB-H1 scheduler stalled at slot ", slot);
  }
  return with_transfers(slots.order(), PipelineLayout{});
}

PipelineProgram greedy_zero_bubble_program(int stages, int micro_batches,
                                           const PipelineLayout& layout, int max_held) {
  const int virtual_stages = stages * layout.chunks;
  std::vector<int> next_forward(static_cast<std::size_t>(virtual_stages), 0);
  std::vector<int> next_backward(next_forward.size(), 0);
  UnitSlots slots(virtual_stages, stages, micro_batches);
  for (int slot = 0; !slots.finished(); ++slot) {
    bool ran = false;
    for (int stage = 0; stage < stages; ++stage) {
      int best_backward = -1, best_forward = -1;  // virtual stages with a ready op
      for (int chunk = 0; chunk < layout.chunks; ++chunk) {
        const int here = pipeline_virtual_stage(layout, stages, stage, chunk);
        const int b = next_backward[static_cast<std::size_t>(here)];
        // Among ready B's the smaller micro-batch goes first (it has waited longest).
        if (b < micro_batches && slots.backward_ready(here, b, slot) &&
            (best_backward < 0 || b < next_backward[static_cast<std::size_t>(best_backward)]))
          best_backward = here;
        const int f = next_forward[static_cast<std::size_t>(here)];
        // Among ready F's the deeper virtual stage goes first: it brings a B closer.
        if (f < micro_batches && slots.forward_ready(here, f, slot) && here > best_forward)
          best_forward = here;
      }
      if (best_backward >= 0) {
        const int b = next_backward[static_cast<std::size_t>(best_backward)]++;
        slots.backward_input(stage, best_backward,
                             pipeline_stage_chunk(layout, stages, best_backward).chunk, b, slot);
        ran = true;
      } else if (best_forward >= 0 && slots.held(stage) < max_held) {
        const int f = next_forward[static_cast<std::size_t>(best_forward)]++;
        slots.forward(stage, best_forward, pipeline_stage_chunk(layout, stages, best_forward).chunk,
                      f, slot);
        ran = true;
      } else {
        ran = slots.weight(stage) || ran;
      }
    }
    // Some rank can always move unless every rank is full of forwards whose B's wait on each
    // other, which the limits (at least 2p - 1 per rank) rule out; a stall is a bug here.
    STRATA_CHECK(ran || slots.finished(), "zero-bubble scheduler stalled at slot ", slot);
  }
  return with_transfers(slots.order(), layout);
}

}  // namespace strata
