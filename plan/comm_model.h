// The planner's communication prediction: every collective and transfer one rank takes part in
// during a training step, with the bytes it sends per link class, computed from the config alone.
//
// The bytes are the communicator's own accounting (parallel/comm/communicator.h: ring collectives
// charge the link to the ring successor, transfers and all-to-alls each peer's link) applied to
// the calls the trainer makes, found by the trainer's own functions: the model partition, the
// reduction plan (ZeRO stage, tied exchange, sequence-parallel sums, norm axes), ZeRO 2/3's
// per-segment reduce-scatters (plain or qgZ's two int4 hops), ZeRO 3's per-segment gathers in
// the model's gather order (plain, qwZ's int8 forward gathers, hpZ's backward gathers inside the
// node), the tensor-parallel sums and gathers of every layer (recomputed ones included), the
// pipeline's activation and gradient messages (per chunk with virtual stages), the loss and
// norm scalars, and the optimizer's own collectives (Adafactor's sums of statistics, Muon's
// gathers of whole matrices: plan/optimizer_state.h). So `stats()` equals the `comm_bytes` of a
// training step in metrics.jsonl and `group_bytes` its `comm_bytes_by_axis`, which
// tests/mpi/plan_memory_test.cpp checks on many layouts.
//
// Context parallelism (parallel.cp) adds, per layer and micro-batch, attention's K/V blocks among
// the cp members in every attention forward (a recomputed one too) and backward, the bytes of
// model/context_attention.h's table (context_attention_bytes), and every op's rows are seq_len / cp
// of each sequence.
//
// A mixture of experts adds, per MoE block and micro-batch (model/moe/moe_layer.h,
// moe_exchange.h): under tensor parallelism the gates' gradient, an all-reduce of N·top_k fp32
// over tp in the backward pass; under expert parallelism (ep > 1) the token exchange over the ep
// group, forward the counts (an all-to-all of E/ep int32 to each member), the assignment rows to
// the experts' ranks and their outputs back, backward the output gradients out and the input
// gradients back (and a full recompute reruns the forward's three). Rows are C wide, in the
// backend's row element size. How many rows go where is decided by the routing; the prediction
// assumes balanced routing: of its A kept assignments (model/activation_sizes.h
// moe_balanced_assignments: N·top_k dropless) a rank sends A/ep rows to each member and gets as
// many back, so (ep − 1)·A/ep rows leave it per exchange. Exact where the routing fixes the rows
// (top_k = experts), an estimate otherwise. ZeRO's shards and gathers run over expert_dp under
// expert parallelism, each segment's dense part summed over ep first (reduction_plan.h).
//
// For the step-time model each event also says when it happens (its phase), how many messages
// it sends in sequence (the latency term) and the slowest link its pattern crosses (a ring runs
// at the pace of its slowest hop).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "plan/config.h"

namespace strata {

// The communicator a call runs on: an axis of the mesh, one of the data-parallel group's
// node-wise factors (ZeRO++ hpZ and qgZ), or under expert parallelism one of its two parts
// (parallel/mesh/mesh.h): ep, the ep consecutive dp ranks that exchange tokens, and expert_dp,
// the dp/ep ranks holding the same experts (ZeRO's shards and the expert gradients' sums); under
// context parallelism cp (attention's K/V) and dp_cp (the weights' dp × cp replicas: the
// gradients, ZeRO's shards and the loss move over it instead of dp).
enum class CommGroup { tp, pp, dp, dp_intra_node, dp_inter_node, ep, expert_dp, cp, dp_cp };

enum class CommPhase {
  forward,   // inside every micro-batch's forward pass (blocking: on the critical path)
  backward,  // inside every micro-batch's backward pass (blocking)
  pipeline,  // a pipeline activation or gradient message (placed by the schedule)
  gather,    // a ZeRO-3 weight gather (prefetched behind the previous segment's compute)
  step,      // after the last backward pass: gradient reductions, norm, loss
  update,    // after the optimizer: the gathers of updated shards (ZeRO 1 and 2)
};

struct CommEvent {
  std::string kind;  // the communicator's kind: all_reduce, reduce_scatter, all_gather, ...
  CommGroup group = CommGroup::dp;
  CommPhase phase = CommPhase::step;
  std::map<LinkClass, std::uint64_t> bytes;  // sent by this rank per call, per link class
  int messages = 1;                          // messages sent one after another per call
  LinkClass slowest = LinkClass::intra_node;
  int repeats = 1;   // calls per step
  std::string what;  // e.g. "layer sums", "tied wte exchange" (for --explain)
  // A ring collective's members on the predicted rank's node: NCCL runs a ring that crosses
  // nodes as several channels, one per NIC, so its node-crossing hop can use this many devices'
  // inter-node links at once (1 for transfers and all-to-alls: each uses its own device's link).
  int node_members = 1;
  // Pipeline messages: the sending chunk of the rank (its virtual stage; 0 without virtual
  // stages).
  int chunk = 0;

  std::uint64_t total_bytes() const;
};

struct CommPrediction {
  std::vector<CommEvent> events;

  // Bytes per step by kind and link class (zero entries left out), as comm_bytes reports them.
  std::map<std::string, std::map<LinkClass, std::uint64_t>> bytes_by_kind() const;
  // Bytes per step on one communicator: tp, pp, dp, ep, expert_dp, cp, dp_cp as
  // comm_bytes_by_axis reports them (dp without its node groups, nor ep and expert_dp, nor dp_cp).
  std::uint64_t group_bytes(CommGroup group) const;
  std::uint64_t link_bytes(LinkClass link) const;
};

// The rank at pipeline stage `stage`, tensor-parallel rank `tp_rank` and data-parallel rank
// `dp_rank` of `config` on `world_size` ranks (under DiLoCo: in the first worker, inner steps).
// `row_element_bytes` is one element of the activation rows that the tensor-parallel sums and
// gathers move: 4 on the cpu backend (fp32 storage under emulated mixed precision), the compute
// type's size on cuda (model/gpt_cuda.cu sums its bf16/fp16 rows as they are;
// plan/compute_model.h's activation_element_bytes). Everything else moves fp32 on both.
CommPrediction predict_communication(const Config& config, int world_size, int stage = 0,
                                     int tp_rank = 0, int dp_rank = 0,
                                     std::size_t row_element_bytes = sizeof(float));

const char* comm_group_name(CommGroup group);

}  // namespace strata
