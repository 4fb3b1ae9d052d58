// The ParameterAccess (model/parameter_access.h) of a CUDA rank under ZeRO stages 2 and 3 over
// NCCL: the segments of parallel/sharded_parameters.h (the same uneven pieces, shard_counts, and
// the same stage-2 policy), moved device to device and queued on the compute stream like the
// kernels, so nothing waits for the host:
//   weights (stage 3): the segment is all-gathered from every rank's compute-dtype shard
//     (NcclCommunicator::all_gather_v) into a buffer of its own, freed after its last user
//     (stream-ordered: after the kernels that read it). No prefetch: the gather is queued just
//     before its kernels on the same stream.
//   gradients (stages 2, 3): a zeroed bucket per segment; when due it is reduce-scattered
//     (NcclCommunicator::reduce_scatter_sum_v) and this rank's piece is added into its gradient
//     shard.
// The ZeRO++ switches run staged through the host (cuda_staged_sharding.h), not here.
// Built only with the CUDA backend. Status: compiled for sm_90a, never run on a GPU (untested).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/accumulate.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_collectives.h"
#include "model/kernels/cuda/device_context.h"
#include "model/parameter_access.h"
#include "parallel/nccl_communicator.h"
#include "parallel/reduction_plan.h"
#include "parallel/sharded_parameters.h"
#include "train/cuda_segment_buffers.h"

namespace strata {

template <class T>
class NcclShardedParameters final : public DeviceParameterAccess<T> {
 public:
  NcclShardedParameters(std::vector<ParameterSegment> segments, const ReductionPlan& plan,
                        NcclCommunicator& dp, GradientReduction when, cuda::DeviceContext& ctx)
      : segments_(std::move(segments)),
        plan_(plan),
        dp_(dp),
        when_(when),
        ctx_(ctx),
        gathered_(segments_.size(), ctx.stream()),
        buckets_(segments_.size(), ctx.stream()),
        passes_(segments_.size(), 0) {}

  // As StagedShardedParameters::bind: device weights over plan.parameter_range, gradients over
  // plan.gradient_range (zeroed by the caller; null: forward passes only).
  void bind(const T* weights, float* gradients, int backward_passes) override {
    weights_ = weights;
    gradients_ = gradients;
    backward_passes_ = backward_passes;
  }
  void finish_step() override {
    STRATA_CHECK(!buckets_.holds_any(), "a gradient bucket was not reduced");
  }

  const T* acquire_weights(int index, WeightUse) override {
    const ElementRange range = segment(index).range;
    if (!plan_.parameters_by_segment) return weights_ + range.begin;
    bool first = false;
    T* out = static_cast<T*>(
        gathered_.take(static_cast<std::size_t>(index), range.size() * sizeof(T), false, first));
    if (first) {
      const ElementRange mine = intersect(range, plan_.owned);
      const T* in = mine.empty() ? weights_ : weights_ + (mine.begin - plan_.owned.begin);
      const std::vector<std::size_t> counts = shard_counts(plan_, range, dp_.size());
      dp_.all_gather_v(cuda::element_of<T>(), in, out, counts, ctx_.stream());
    }
    return out;
  }

  void release_weights(int index) override {
    if (!plan_.parameters_by_segment) return;
    if (gathered_.leave(static_cast<std::size_t>(index)))
      gathered_.free(static_cast<std::size_t>(index));
  }

  float* acquire_gradients(int index) override {
    STRATA_CHECK(gradients_ != nullptr, "a backward pass without a gradient buffer");
    const ElementRange range = segment(index).range;
    if (!plan_.gradients_by_segment) return gradients_ + range.begin;
    bool first = false;
    return static_cast<float*>(
        buckets_.take(static_cast<std::size_t>(index), range.size() * sizeof(float), true, first));
  }

  void release_gradients(int index) override {
    if (!plan_.gradients_by_segment) return;
    const std::size_t i = static_cast<std::size_t>(index);
    if (!buckets_.leave(i)) return;
    // Kept for the step's next pass (take() finds it as it is), or reduced now.
    if (when_ == GradientReduction::step && ++passes_[i] < backward_passes_) return;
    passes_[i] = 0;
    const ElementRange range = segment(index).range;
    const ElementRange mine = intersect(range, plan_.owned);
    const std::vector<std::size_t> counts = shard_counts(plan_, range, dp_.size());
    float* received = nullptr;
    STRATA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&received),
                                      std::max<std::size_t>(mine.size(), 1) * sizeof(float),
                                      ctx_.stream()));
    dp_.reduce_scatter_sum_v(static_cast<const float*>(buckets_.data(i)), received, counts,
                             ctx_.stream());
    if (!mine.empty())
      cuda::add_into(gradients_ + (mine.begin - plan_.owned.begin), received,
                     static_cast<long>(mine.size()), ctx_.stream());
    STRATA_CUDA_CHECK(cudaFreeAsync(received, ctx_.stream()));
    buckets_.free(i);
  }

  std::size_t peak_gathered_bytes() const override { return gathered_.peak_bytes(); }
  std::size_t peak_bucket_bytes() const override { return buckets_.peak_bytes(); }
  std::size_t secondary_bytes() const override { return 0; }

 private:
  const ParameterSegment& segment(int index) const {
    return segments_.at(static_cast<std::size_t>(index));
  }

  std::vector<ParameterSegment> segments_;
  const ReductionPlan& plan_;
  NcclCommunicator& dp_;
  GradientReduction when_;
  cuda::DeviceContext& ctx_;
  const T* weights_ = nullptr;
  float* gradients_ = nullptr;
  int backward_passes_ = 1;
  DeviceSegmentBuffers gathered_, buckets_;
  std::vector<int> passes_;  // backward passes added into a bucket since its last reduction
};

}  // namespace strata
