// The model's weights and gradients under ZeRO (parallel/mesh/reduction_plan.h), on host memory
// over the data-parallel group: the ParameterAccess (model/parameter_access.h) a CPU rank hands its
// model, and the device backend's when it stages through the host.
//
// Stages 0 and 1: flat buffers (the plan's whole buffer); nothing happens per segment.
// Stage 2 (gradients_by_segment): the backward pass adds a segment's gradients into a bucket of
//   the segment's size; when the bucket is due it is reduce-scattered over dp (uneven chunks:
//   each owner receives the sum of the part in its shard, shard_counts) and added into the
//   owner's gradient shard, and the bucket is freed. When it is due is the run's choice
//   (parallel.zero.gradient_reduction):
//     step:        the bucket accumulates every micro-batch of the step and is reduced after the
//                  step's last backward pass of its segment: the bytes of stage 1, and the buckets
//                  of a stage's segments live from their first backward pass to their last.
//     micro_batch: reduced after every backward pass: accumulation × the bytes, and at most the
//                  segments a backward pass has in flight are held.
// Stage 3 (parameters_by_segment): the weights too are held as the owned shard only (of the
//   compute-dtype copy: that is what moves); acquire_weights all-gathers the segment over dp into
//   a buffer of its own, freed when the last user releases it. Every use gathers again: the
//   forward pass, the backward pass (which its recomputation shares), the tied wte for the
//   embedding and again for the head. Prefetch: the gathers of a step come in the order of the
//   step before (the schedule is the same every step), so after gathering the k-th segment of a
//   step the k+1-th of the previous step's order is started (non-blocking) unless it is held, and
//   its acquire waits for it: one gather in flight overlaps the segment in use. A wrong guess
//   (the first step, an evaluation after training steps) costs only the early buffer; an unused
//   prefetch is completed and freed at the next bind(). Training and evaluation keep an order
//   each.
// ZeRO++ on stage 3 (parallel/zero/segment_collectives.h for the quantised collectives):
//   quantized_weights (qwZ): forward gathers move int8 blocks.
//   hierarchical_partition (hpZ): each forward gather also refreshes this rank's secondary copy
//     of the segment: its 1/G (G = the dp ranks of its node, rank `local` keeping piece `local`);
//     backward gathers all-gather those copies inside the node only. The weights change only at
//     the optimizer step, and a step's forward of a segment always precedes its backward, so the
//     copy is always the step's weights (as the forward saw them: dequantised under qwZ).
//   quantized_gradients (qgZ): the buckets' reduce-scatters take the two int4 hops.
//
// All members of the data-parallel group run the same model code on the same schedule, so their
// acquire and release calls, and the collectives behind them, come in the same order.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/parameter_access.h"
#include "parallel/comm/communicator.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/zero/gather_order.h"
#include "parallel/zero/gradient_reduction.h"
#include "parallel/zero/segment_collectives.h"

namespace strata {

// A segment's pieces over `n` ranks, cut evenly: the hpZ secondary partition inside a node (the
// last pieces may be shorter or empty).
std::vector<std::size_t> secondary_piece_counts(std::size_t size, int n);

// How the sharded collectives run: the stage-2 policy and the ZeRO++ switches (stage 3).
struct ShardingOptions {
  GradientReduction when = GradientReduction::step;
  bool quantized_weights = false;
  bool hierarchical_partition = false;
  bool quantized_gradients = false;
};

class ShardedParameters final : public ParameterAccess<float> {
 public:
  ShardedParameters(std::vector<ParameterSegment> segments, const ReductionPlan& plan,
                    const ShardingGroups& groups, const ShardingOptions& options);

  // What the following passes read and write: the compute-dtype weights over
  // plan.parameter_range and the gradients over plan.gradient_range (null: forward passes only;
  // zeroed by the caller before a step), not owned. `backward_passes`: how many backward passes
  // the step runs through this model (its micro-batches).
  void bind(const float* weights, float* gradients, int backward_passes);
  // How many models read each segment (default 1 each): with several chunks per rank
  // (model/chunk_parameters.h) a segment two chunks share (zbv's tied wte) has its gradients
  // released twice per backward pass, and its bucket is due after them all.
  void set_readers(std::vector<int> readers_per_segment);

  const float* acquire_weights(int index, WeightUse use) override;
  void release_weights(int index) override;
  float* acquire_gradients(int index) override;
  void release_gradients(int index) override;

  // Whether a bucket still holds unreduced gradients (after a step: a schedule that did not run
  // every backward pass it announced).
  bool has_pending_gradients() const;
  // The most bytes held at once in gathered weights and in gradient buckets, so far; the bytes
  // of the hpZ secondary copies; gathers a prefetch had already started when acquired.
  std::size_t peak_gathered_bytes() const { return gathered_.peak; }
  std::size_t peak_bucket_bytes() const { return buckets_.peak; }
  std::size_t secondary_bytes() const;
  long prefetch_hits() const { return prefetch_hits_; }

 private:
  struct Held {
    std::vector<float> values;
    int users = 0;   // acquisitions not yet released
    int passes = 0;  // backward passes added into a bucket since its last reduction
  };
  struct Pool {
    std::vector<Held> held;
    std::size_t live = 0, peak = 0;
    float* take(std::size_t index, std::size_t size);     // zeroed the first time
    float* reserve(std::size_t index, std::size_t size);  // allocated, no user yet
    void free(std::size_t index);
  };
  using Gather = std::pair<int, WeightUse>;  // a segment and the pass it is gathered for

  const ParameterSegment& segment(int index) const;
  void reduce_bucket(std::size_t index);
  // Starts gathering `gather` into a reserved buffer (primary shards, or hpZ's node copies).
  std::unique_ptr<SegmentGather> start_gather(const Gather& gather);
  void keep_secondary(int index);  // hpZ: this rank's piece of a forward-gathered segment
  void prefetch_after_gather();
  void drain_prefetch();

  std::vector<ParameterSegment> segments_;
  const ReductionPlan& plan_;
  ShardingGroups groups_;
  ShardingOptions options_;
  const float* weights_ = nullptr;
  float* gradients_ = nullptr;
  int backward_passes_ = 1;
  std::vector<int> readers_;  // per segment
  Pool gathered_, buckets_;
  std::vector<std::vector<float>> secondary_;  // hpZ, per segment
  std::vector<float> received_;                // one reduce-scatter's part of this rank
  GatherOrder<Gather> order_;  // predicts the next gather; the one in flight (segment -1: none)
  std::unique_ptr<SegmentGather> in_flight_;
  Gather in_flight_gather_{-1, WeightUse::forward};
  long prefetch_hits_ = 0;
};

}  // namespace strata
