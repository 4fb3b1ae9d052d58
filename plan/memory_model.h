// The planner's memory prediction: what one rank of a layout holds, computed from the config alone
// (nothing is allocated, so plans for models far larger than this machine can be priced).
//
// It is the CPU trainer's own account (plan/memory_account.h MemoryAccount, reported as
// `memory_bytes` in metrics.jsonl) reached by the trainer's own functions: the partition
// (model_partition), its layout, the reduction plan of its ZeRO stage, the pipeline schedule's
// simulated activation slots and the activation formula that Gpt checks its allocations against
// (model/activation_sizes.h). So the prediction equals the trainer's figures exactly, which
// tests/mpi/plan_memory_test.cpp checks on several layouts. The exception is a mixture of
// experts' routed rows: the MoE blocks' activations are priced under balanced routing
// (activation_elements' moe_per_slot), exact only where the routing fixes the rows (the test's
// MoE layouts route every token to every expert). Its parameters, gradients and optimizer state
// are exact: under expert parallelism the layout holds the router and E/ep experts per MoE block
// (ParameterLayout::for_partition with ep_size) and ZeRO shards over expert_dp.
//
// Every field is predicted, as the account stands from the second step on (all activation slots
// in use, ZeRO 3's prefetch running). The test can check rank 0 only (the rank that reports
// memory), i.e. a first pipeline stage, which under zbv also holds the tied head; the last stage
// of the other schedules follows the same code path. With virtual stages a rank's activations are
// its chunk models' (one Gpt per chunk, each with its slots and its workspace).
#pragma once

#include "plan/config.h"
#include "plan/memory_account.h"
#include "plan/placement.h"

namespace strata {

// The rank at pipeline stage `stage`, tensor-parallel rank `tp_rank` and data-parallel rank
// `dp_rank` of `config` on a world of `world_size` ranks (under DiLoCo: every worker's mesh).
MemoryAccount predict_memory(const Config& config, int world_size, int stage = 0, int tp_rank = 0,
                             int dp_rank = 0);

}  // namespace strata
