// The model's weights and gradients under ZeRO (parallel/reduction_plan.h), on host memory over
// the data-parallel group: the ParameterAccess (model/parameter_access.h) a CPU rank hands its
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
//   prefetch is completed and freed at the next bind(). Training and evaluation keep an order each.
//
// All members of the data-parallel group run the same model code on the same schedule, so their
// acquire and release calls, and the collectives behind them, come in the same order.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "model/parameter_access.h"
#include "parallel/communicator.h"
#include "parallel/reduction_plan.h"

namespace strata {

enum class GradientReduction { step, micro_batch };
// "step" | "micro_batch" (the words of parallel.zero.gradient_reduction); else an Error.
GradientReduction gradient_reduction_from_name(const std::string& name);

class ShardedParameters final : public ParameterAccess<float> {
 public:
  // `dp`: the data-parallel group (not owned; may be null at dp 1).
  ShardedParameters(std::vector<ParameterSegment> segments, const ReductionPlan& plan,
                    Communicator* dp, GradientReduction when);

  // What the following passes read and write: the compute-dtype weights over
  // plan.parameter_range and the gradients over plan.gradient_range (null: forward passes only;
  // zeroed by the caller before a step), not owned. `backward_passes`: how many backward passes
  // the step runs through this model (its micro-batches).
  void bind(const float* weights, float* gradients, int backward_passes);

  const float* acquire_weights(int index) override;
  void release_weights(int index) override;
  float* acquire_gradients(int index) override;
  void release_gradients(int index) override;

  // Gathers that a prefetch had already started when they were acquired, so far.
  long prefetch_hits() const { return prefetch_hits_; }

  // Whether a bucket still holds unreduced gradients (after a step: a schedule that did not run
  // every backward pass it announced).
  bool has_pending_gradients() const;
  // The most bytes held at once in gathered weights and in gradient buckets, so far.
  std::size_t peak_gathered_bytes() const { return gathered_.peak; }
  std::size_t peak_bucket_bytes() const { return buckets_.peak; }

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
  const ParameterSegment& segment(int index) const;
  void reduce_bucket(std::size_t index);
  // Gathers segment `index` into `out` (start: non-blocking, returned).
  std::unique_ptr<PendingCollective> gather(int index, float* out, bool start);
  void prefetch_after_gather();
  void drain_prefetch();

  std::vector<ParameterSegment> segments_;
  const ReductionPlan& plan_;
  Communicator* dp_;
  GradientReduction when_;
  const float* weights_ = nullptr;
  float* gradients_ = nullptr;
  int backward_passes_ = 1;
  Pool gathered_, buckets_;
  std::vector<float> received_;  // one reduce-scatter's part of this rank
  // Gather orders (segment indices) of the last step, by kind of pass (0 forward only, 1
  // training), and of the current one; the gather in flight and its segment (-1: none).
  std::vector<int> previous_order_[2], order_;
  int order_kind_ = 1;
  std::unique_ptr<PendingCollective> in_flight_;
  int in_flight_segment_ = -1;
  long prefetch_hits_ = 0;
};

}  // namespace strata
