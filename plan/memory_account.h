// The bytes one rank holds for training, by purpose: what the trainer reports (metrics.jsonl
// `memory_bytes`, the start-up line) and what the planner predicts (plan/memory_model.h), one
// struct for both so that a prediction is checked field by field (docs/ARCHITECTURE.md §5).
#pragma once

#include <cstddef>

namespace strata {

// Bytes this rank holds for training, by purpose (metrics.jsonl `memory_bytes`, the startup line).
struct MemoryAccount {
  std::size_t master_weights = 0;     // fp32 master weights (in fp32 the weights the model reads)
  std::size_t compute_weights = 0;    // the bf16/fp16 copy the model reads (0 in fp32)
  std::size_t gradients = 0;          // fp32 gradients
  std::size_t optimizer_state = 0;    // the optimizer's state over its owned range
  std::size_t secondary_weights = 0;  // the node's secondary weight copies (ZeRO++ hpZ)
  // Transient, at their peak so far: weights gathered for use (ZeRO 3) and gradient buckets
  // awaiting their reduce-scatter (ZeRO 2 and 3). Not part of model_state().
  std::size_t gathered_weights = 0;
  std::size_t gradient_buckets = 0;
  std::size_t activations = 0;    // saved activations, all slots
  std::size_t communication = 0;  // the largest scratch one reduction of the plan needs

  std::size_t model_state() const {
    return master_weights + compute_weights + gradients + optimizer_state + secondary_weights;
  }
};

}  // namespace strata
