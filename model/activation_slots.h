// The bookkeeping of activation slots that both GPT models share (model/gpt.h on the CPU,
// model/gpt_cuda.h on CUDA; docs/ARCHITECTURE.md §5): which micro-batch a slot holds, where it
// stands between its forward and its backward, and the checks on its use. A slot's arrays are
// GptSlot's (model/gpt_arrays.h); what a slot means is written here once.
#pragma once

namespace strata {

// Where one slot stands. A model's Slot extends it with its arrays.
struct SlotState {
  int batch = 0, time = 0;   // the micro-batch held: `batch` sequences of `time` tokens
  bool forwarded = false;    // a forward waits for its backward (or was an evaluation)
  bool has_targets = false;  // that forward had targets: its losses are valid
  // Split backward: the input pass ran, the weight pass has not; the slot is still taken.
  bool weight_pending = false;
};

// What a model allows its slots to hold.
struct SlotLimits {
  int slots = 1;      // micro-batches held at once
  int max_batch = 1;  // sequences per micro-batch, at most
  int seq_len = 1;    // tokens per sequence, at most
  // The tensor-parallel size when sequence parallelism splits the B·T rows over it, else 1.
  int row_split = 1;
};

// Errors unless `slot` is a slot and a micro-batch of B sequences of T tokens fits it (and splits
// over the tensor-parallel ranks under sequence parallelism).
void check_slot_batch(const SlotLimits& limits, int slot, int B, int T);

// Errors unless `slot` is a slot holding a forward that waits for its backward, with targets when
// `needs_targets` (the last stage starts its backward from the losses).
void check_slot_backward(const SlotLimits& limits, const SlotState& state, int slot,
                         bool needs_targets);

// Errors unless `slot` is a slot whose split backward ran its input pass and waits for its weight
// pass.
void check_slot_weight_backward(const SlotLimits& limits, const SlotState& state, int slot);

// Errors when a forward would overwrite a slot whose weight pass has not run.
void check_slot_free(const SlotState& state, int slot);

}  // namespace strata
