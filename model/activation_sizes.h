// How many activation elements a model partition keeps (model/gpt_storage.h's slots and recompute
// workspace), as a formula: the planner (plan/memory_model.h) predicts memory with it, and Gpt
// checks every allocation against it, so the two cannot drift apart.
#pragma once

#include <cstddef>

#include "model/gpt.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"

namespace strata {

struct ActivationElements {
  std::size_t per_slot = 0;   // one micro-batch's saved activations (Gpt::Slot)
  std::size_t workspace = 0;  // the recompute workspace, shared by the slots
};

// For micro-batches of up to `max_batch` sequences of shape.seq_len tokens. `split_backward`: each
// slot also keeps what its weight gradients need between the two halves of the split backward
// (GptOptions::split_backward).
ActivationElements activation_elements(const GptShape& shape, const ModelPartition& partition,
                                       int max_batch, Recompute recompute,
                                       bool split_backward = false);

}  // namespace strata
