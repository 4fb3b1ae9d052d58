#include "model/activation_slots.h"

#include "model/core/error.h"

namespace strata {

void check_slot_batch(const SlotLimits& limits, int slot, int B, int T) {
  STRATA_CHECK(slot >= 0 && slot < limits.slots, "activation slot ", slot, " out of range");
  STRATA_CHECK(B >= 1 && B <= limits.max_batch && T >= 1 && T <= limits.seq_len);
  STRATA_CHECK((B * T) % limits.row_split == 0,
               "sequence parallelism needs B·T divisible by the tensor-parallel size");
}

void check_slot_backward(const SlotLimits& limits, const SlotState& state, int slot,
                         bool needs_targets) {
  STRATA_CHECK(slot >= 0 && slot < limits.slots && state.forwarded, "backward of slot ", slot,
               " without its forward");
  if (needs_targets) STRATA_CHECK(state.has_targets, "backward needs a forward with targets");
}

void check_slot_weight_backward(const SlotLimits& limits, const SlotState& state, int slot) {
  STRATA_CHECK(slot >= 0 && slot < limits.slots && state.weight_pending, "weight backward of slot ",
               slot, " without its input backward");
}

void check_slot_free(const SlotState& state, int slot) {
  STRATA_CHECK(!state.weight_pending, "forward into activation slot ", slot,
               " whose weight gradients are still pending");
}

}  // namespace strata
