#include "parallel/pipeline/pipeline_generators.h"

#include <cstddef>
#include <deque>
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

PipelineProgram greedy_zero_bubble_program(int stages, int micro_batches,
                                           const PipelineLayout& layout, int max_held) {
  const int virtual_stages = stages * layout.chunks;
  const auto index = [&](int virtual_stage, int micro_batch) {
    return static_cast<std::size_t>(virtual_stage) * static_cast<std::size_t>(micro_batches) +
           static_cast<std::size_t>(micro_batch);
  };
  // End slot of each (virtual stage, micro-batch)'s F and B; -1 until it has run.
  constexpr int kNotYet = -1;
  std::vector<int> forward_end(index(virtual_stages, 0), kNotYet);
  std::vector<int> backward_end(forward_end.size(), kNotYet);
  std::vector<int> next_forward(static_cast<std::size_t>(virtual_stages), 0);
  std::vector<int> next_backward(next_forward.size(), 0);
  std::vector<std::deque<PipelineOp>> pending_weight(static_cast<std::size_t>(stages));
  std::vector<int> held(static_cast<std::size_t>(stages), 0);
  PipelineProgram order(static_cast<std::size_t>(stages));
  long remaining = 3L * virtual_stages * micro_batches;
  const auto done_by = [](int end, int slot) { return end != kNotYet && end <= slot; };
  for (int slot = 0; remaining > 0; ++slot) {
    int ran = 0;
    for (int stage = 0; stage < stages; ++stage) {
      const auto s = static_cast<std::size_t>(stage);
      int best_backward = -1, best_forward = -1;  // virtual stages with a ready op
      for (int chunk = 0; chunk < layout.chunks; ++chunk) {
        const int here = pipeline_virtual_stage(layout, stages, stage, chunk);
        const int b = next_backward[static_cast<std::size_t>(here)];
        // Among ready B's the smaller micro-batch goes first (it has waited longest).
        if (b < micro_batches && done_by(forward_end[index(here, b)], slot) &&
            (here + 1 == virtual_stages || done_by(backward_end[index(here + 1, b)], slot)) &&
            (best_backward < 0 || b < next_backward[static_cast<std::size_t>(best_backward)]))
          best_backward = here;
        const int f = next_forward[static_cast<std::size_t>(here)];
        // Among ready F's the deeper virtual stage goes first: it brings a B closer.
        if (f < micro_batches && (here == 0 || done_by(forward_end[index(here - 1, f)], slot)) &&
            here > best_forward)
          best_forward = here;
      }
      auto& ops = order[s];
      if (best_backward >= 0) {
        const int b = next_backward[static_cast<std::size_t>(best_backward)]++;
        const int chunk = pipeline_stage_chunk(layout, stages, best_backward).chunk;
        ops.push_back({Kind::backward_input, b, -1, chunk});
        pending_weight[s].push_back({Kind::backward_weight, b, -1, chunk});
        backward_end[index(best_backward, b)] = slot + 1;
      } else if (best_forward >= 0 && held[s] < max_held) {
        const int f = next_forward[static_cast<std::size_t>(best_forward)]++;
        ops.push_back(
            {Kind::forward, f, -1, pipeline_stage_chunk(layout, stages, best_forward).chunk});
        forward_end[index(best_forward, f)] = slot + 1;
        ++held[s];
      } else if (!pending_weight[s].empty()) {
        ops.push_back(pending_weight[s].front());
        pending_weight[s].pop_front();
        --held[s];
      } else {
        continue;
      }
      ++ran;
      --remaining;
    }
    // Some rank can always move unless every rank is full of forwards whose B's wait on each
    // other, which the limits (at least 2p - 1 per rank) rule out; a stall is a bug here.
    STRATA_CHECK(ran > 0 || remaining == 0, "zero-bubble scheduler stalled at slot ", slot);
  }
  return with_transfers(order, layout);
}

}  // namespace strata
