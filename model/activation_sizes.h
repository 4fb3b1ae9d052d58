// How many activation elements a model partition keeps (model/gpt_arrays.h's slots and recompute
// workspace), as a formula: the planner (plan/memory_model.h) predicts memory with it, and Gpt
// checks every allocation against it, so the two cannot drift apart.
//
// The MoE blocks' MoeActivations (model/moe/moe_layer.h) are the one part whose size depends on
// the data: their rows are the kept assignments A of the micro-batch's tokens and the rows R its
// experts computed, which the routing decides. They grow at a block's first forward (and never
// shrink: a slot keeps its largest micro-batch's), so Gpt cannot check them when it allocates a
// slot; `moe_per_slot` is their size under balanced routing (moe_balanced_assignments), exact
// whenever the routing fixes the rows (top_k = experts; or every expert full in every capacity
// group), an estimate otherwise.
#pragma once

#include <cstddef>

#include "model/gpt.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"

namespace strata {

struct ActivationElements {
  std::size_t per_slot = 0;   // one micro-batch's saved activations (Gpt::Slot), MoE's apart
  std::size_t workspace = 0;  // the recompute workspace, shared by the slots
  // One micro-batch's MoeActivations over the partition's MoE blocks, kept in each slot under
  // every recompute mode, under balanced routing. Per block, with N = B·T tokens (all rows, also
  // under sequence parallelism), E experts, k = top_k, H = F/tp hidden columns and Fc = H (GELU)
  // or 2H (SwiGLU) rows of the fc product, A the kept assignments and R = A the expert rows
  // (balanced: each of the ep members sends A/ep rows to each, so every rank's experts get A rows,
  // whatever ep):
  //   N·C (x) + 2·N·E (probs, dlogits) + N (lse) + N·k (gates) + A·C (out)
  //   + R·C (xe) + R·C (dout) + 2·R·Fc (pre, dpre) + R·H (act).
  std::size_t moe_per_slot = 0;
};

// The kept assignments of one MoE block for `tokens` tokens (whole sequences of `seq_len`) in
// training micro-batches (capacity groups of group_sequences sequences) under balanced routing:
// each expert is chosen by tokens·top_k/experts of every group's choices and keeps at most its
// capacity of them, so min(G·k, E·capacity) per group of G tokens (N·k when dropless). Real
// routing is uneven: dropless it keeps exactly N·k, but an expert's (and so an expert rank's)
// rows vary; under capacity fewer are kept than here where experts are unevenly loaded.
std::size_t moe_balanced_assignments(const MoeConfig& moe, int tokens, int seq_len);

// How many of the partition's blocks (every chunk's) are MoE blocks.
int moe_block_count(const GptShape& shape, const ModelPartition& partition);

// For micro-batches of up to `max_batch` sequences of shape.seq_len tokens. `split_backward`: each
// slot also keeps what its weight gradients need between the two halves of the split backward
// (GptOptions::split_backward).
ActivationElements activation_elements(const GptShape& shape, const ModelPartition& partition,
                                       int max_batch, Recompute recompute,
                                       bool split_backward = false);

}  // namespace strata
