// The ParameterAccess (model/parameter_access.h) of a CUDA rank under ZeRO stages 2 and 3 over
// NCCL: the segments of parallel/zero/sharded_parameters.h (the same uneven pieces, shard_counts,
// and the same stage-2 policy), moved device to device and queued on the compute stream like the
// kernels, so nothing waits for the host:
//   weights (stage 3): the segment is all-gathered from every rank's compute-dtype shard
//     (NcclCommunicator::all_gather_v) into a buffer of its own, freed after its last user
//     (stream-ordered: after the kernels that read it). Prefetch, as on the host
//     (parallel/zero/sharded_parameters.h): after the k-th gather of a step, the k+1-th of the
//     previous step's order is started on the context's copy stream over a second NCCL communicator
//     of the dp group (so it may run beside the compute stream's collectives), once the compute
//     stream has reached that point (an event); its acquire makes the compute stream wait for it
//     (another event). An unused prefetch is waited for and freed at the step's end.
//   gradients (stages 2, 3): a zeroed bucket per segment; when due it is reduce-scattered
//     (NcclCommunicator::reduce_scatter_sum_v) and this rank's piece is added into its gradient
//     shard.
// The ZeRO++ switches run staged through the host (cuda_staged_sharding.h), not here.
// Built only with the CUDA backend.
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
#include "parallel/comm/nccl_communicator.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/zero/gather_order.h"
#include "parallel/zero/sharded_parameters.h"
#include "train/backend/cuda_segment_buffers.h"

namespace strata {

template <class T>
class NcclShardedParameters final : public DeviceParameterAccess<T> {
  using Base = DeviceParameterAccess<T>;
  using Base::buckets_, Base::ctx_, Base::gathered_, Base::gradients_, Base::plan_, Base::segment,
      Base::segments_, Base::weights_;

 public:
  // `dp`: the sharding group (ProcessGroups::sharding: expert_dp under expert parallelism).
  // `ep`: the expert-parallel group, over which plan.summed_over_ep is summed before a bucket's
  // reduce-scatter (null without expert parallelism). `prefetch`: a second communicator of the
  // sharding group for the prefetched gathers (null: none).
  NcclShardedParameters(std::vector<ParameterSegment> segments, const ReductionPlan& plan,
                        NcclCommunicator& dp, NcclCommunicator* ep, NcclCommunicator* prefetch,
                        GradientReduction when, cuda::DeviceContext& ctx)
      : DeviceParameterAccess<T>(std::move(segments), plan, ctx),
        dp_(dp),
        ep_(ep),
        prefetch_(prefetch),
        when_(when),
        passes_(this->segments_.size(), 0) {
    STRATA_CHECK(plan.summed_over_ep.empty() || ep != nullptr,
                 "ZeRO under expert parallelism needs the ep group");
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&fetched_, cudaEventDisableTiming));
  }
  ~NcclShardedParameters() override {
    if (in_flight_ >= 0) cudaStreamSynchronize(ctx_.copy_stream());
    cudaEventDestroy(ready_);
    cudaEventDestroy(fetched_);
  }
  NcclShardedParameters(const NcclShardedParameters&) = delete;
  NcclShardedParameters& operator=(const NcclShardedParameters&) = delete;

  // As StagedShardedParameters::bind: device weights over plan.parameter_range, gradients over
  // plan.gradient_range (zeroed by the caller; null: forward passes only).
  void bind(const T* weights, float* gradients, int backward_passes) override {
    drain_prefetch();
    order_.begin(gradients != nullptr);
    weights_ = weights;
    gradients_ = gradients;
    backward_passes_ = backward_passes;
  }
  void finish_step() override {
    drain_prefetch();  // before the optimizer writes the shards it reads
    STRATA_CHECK(!buckets_.holds_any(), "a gradient bucket was not reduced");
  }

  const T* acquire_weights(int index, WeightUse) override {
    const ElementRange range = segment(index).range;
    if (!plan_.parameters_by_segment) return weights_ + range.begin;
    const std::size_t i = static_cast<std::size_t>(index);
    T* out = nullptr;
    if (in_flight_ == index) {  // prefetched: its reservation becomes this use
      STRATA_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), fetched_, 0));
      in_flight_ = -1;
      out = static_cast<T*>(gathered_.data(i));
    } else {
      bool first = false;
      out = static_cast<T*>(gathered_.take(i, range.size() * sizeof(T), false, first));
      if (!first) return out;  // in use already
      gather(index, out, dp_, ctx_.stream());
    }
    order_.record(index);
    prefetch_next();
    return out;
  }

  void release_gradients(int index) override {
    if (!plan_.gradients_by_segment) return;
    const std::size_t i = static_cast<std::size_t>(index);
    if (!buckets_.leave(i)) return;
    // Kept for the step's next pass (take() finds it as it is), or reduced now.
    if (when_ == GradientReduction::step && ++passes_[i] < backward_passes_ * this->readers_[i])
      return;
    passes_[i] = 0;
    const ElementRange range = segment(index).range;
    const ElementRange mine = intersect(range, plan_.owned);
    const std::vector<std::size_t> counts = shard_counts(plan_, range, dp_.size());
    // The tensors every ep member holds (the dense ones, the routers) are summed over ep first,
    // so that the reduce-scatter over expert_dp covers every data-parallel rank, as the host's
    // ShardedParameters::reduce_bucket does; the experts' own stay within expert_dp.
    float* bucket = static_cast<float*>(buckets_.data(i));
    for (const ElementRange& dense : plan_.summed_over_ep) {
      const ElementRange part = intersect(dense, range);
      if (!part.empty())
        ep_->all_reduce_sum(bucket + (part.begin - range.begin), part.size(), ctx_.stream());
    }
    float* received = nullptr;
    STRATA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&received),
                                      std::max<std::size_t>(mine.size(), 1) * sizeof(float),
                                      ctx_.stream()));
    dp_.reduce_scatter_sum_v(static_cast<const float*>(bucket), received, counts, ctx_.stream());
    if (!mine.empty())
      cuda::add_into(gradients_ + (mine.begin - plan_.owned.begin), received,
                     static_cast<long>(mine.size()), ctx_.stream());
    STRATA_CUDA_CHECK(cudaFreeAsync(received, ctx_.stream()));
    buckets_.free(i);
  }

  std::size_t secondary_bytes() const override { return 0; }

 private:
  // Queues the gather of segment `index` from every rank's shard into `out` on `stream`.
  void gather(int index, T* out, NcclCommunicator& over, cudaStream_t stream) {
    const ElementRange range = segment(index).range;
    const T* in = owned_piece(weights_, plan_.owned, range);
    const std::vector<std::size_t> counts = shard_counts(plan_, range, dp_.size());
    over.all_gather_v(cuda::element_of<T>(), in, out, counts, stream);
  }
  void prefetch_next() {
    const std::optional<int> predicted = order_.predicted_next();
    if (prefetch_ == nullptr || in_flight_ >= 0 || !predicted) return;
    const int next = *predicted;
    const std::size_t i = static_cast<std::size_t>(next);
    if (gathered_.data(i) != nullptr) return;  // held
    bool first = false;
    T* out =
        static_cast<T*>(gathered_.take(i, segment(next).range.size() * sizeof(T), false, first));
    // The copy stream starts once the compute stream has allocated the buffer (and written the
    // shards: the optimizer runs before any step's gathers).
    STRATA_CUDA_CHECK(cudaEventRecord(ready_, ctx_.stream()));
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(ctx_.copy_stream(), ready_, 0));
    gather(next, out, *prefetch_, ctx_.copy_stream());
    STRATA_CUDA_CHECK(cudaEventRecord(fetched_, ctx_.copy_stream()));
    in_flight_ = next;
  }
  void drain_prefetch() {
    if (in_flight_ < 0) return;
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), fetched_, 0));
    const std::size_t i = static_cast<std::size_t>(in_flight_);
    if (gathered_.leave(i)) gathered_.free(i);  // on the compute stream, after the wait
    in_flight_ = -1;
  }

  NcclCommunicator& dp_;
  NcclCommunicator* ep_;
  NcclCommunicator* prefetch_;
  GradientReduction when_;
  int backward_passes_ = 1;
  std::vector<int> passes_;  // backward passes added into a bucket since its last reduction
  // Predicts the next gather; the segment being prefetched (-1: none) and the events around it.
  GatherOrder<int> order_;
  int in_flight_ = -1;
  cudaEvent_t ready_ = nullptr, fetched_ = nullptr;
};

}  // namespace strata
