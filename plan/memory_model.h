// The planner's memory prediction: what one rank of a layout holds, computed from the config alone
// (nothing is allocated, so plans for models far larger than this machine can be priced).
//
// It is the CPU trainer's own account (train/training_backend.h MemoryAccount, reported as
// `memory_bytes` in metrics.jsonl) reached by the trainer's own functions: the partition
// (model_partition), its layout, the reduction plan of its ZeRO stage, the pipeline schedule's
// simulated activation slots and the activation formula that Gpt checks its allocations against
// (model/activation_sizes.h). So the prediction equals the trainer's figures exactly, which
// tests/mpi/plan_memory_test.cpp checks on several layouts.
//
// Predicted: master_weights, compute_weights, gradients, optimizer_state, communication,
// activations (after the first step: all slots in use), ZeRO 2/3's gradient_buckets and ZeRO++
// hpZ's secondary_weights. Not predicted yet (left 0): ZeRO 3's gathered_weights.
#pragma once

#include "train/config.h"
#include "train/training_backend.h"

namespace strata {

// The rank at pipeline stage `stage`, tensor-parallel rank `tp_rank` and data-parallel rank
// `dp_rank` of `config` on a world of `world_size` ranks (under DiLoCo: every worker's mesh).
MemoryAccount predict_memory(const Config& config, int world_size, int stage = 0, int tp_rank = 0,
                             int dp_rank = 0);

}  // namespace strata
