// The ParameterAccess (model/parameter_access.h) of a CUDA rank under ZeRO stages 2 and 3, with
// the data-parallel traffic staged through the host: the host's ShardedParameters
// (parallel/zero/sharded_parameters.h) does all the sharding (uneven pieces, the stage-2 policy,
// ZeRO++, prefetch) over MPI, exactly as on the CPU backend, and this class mirrors its segments
// on the device:
//   weights (stage 3): the host gathers the segment from the compute-dtype shards (held on the
//     host as floats, exact for bf16/fp16), and it is uploaded in the compute dtype into a device
//     buffer of its own (stream-ordered allocation), freed when released: cudaFreeAsync runs after
//     the kernels queued on the stream that read it. Stages 0-2: the flat device buffer.
//   gradients (stages 2, 3): a device bucket of the segment, zeroed, which the backward pass adds
//     into; on release it is downloaded into the host's bucket (after the stream's kernels), the
//     host reduces it when due, and the device bucket is freed. finish_step() uploads the host's
//     reduced owned gradients.
// Every transfer waits for the device: this trades overlap for one shared, tested code path.
// Built only with the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/cuda/host_dtype.h"
#include "model/parameter_access.h"
#include "parallel/zero/sharded_parameters.h"
#include "train/backend/cuda_segment_buffers.h"

namespace strata {

template <class T>
class StagedShardedParameters final : public DeviceParameterAccess<T> {
  using Base = DeviceParameterAccess<T>;
  using Base::buckets_, Base::ctx_, Base::gathered_, Base::gradients_, Base::plan_, Base::segment,
      Base::segments_, Base::weights_;

 public:
  StagedShardedParameters(std::vector<ParameterSegment> segments, const ReductionPlan& plan,
                          const ShardingGroups& groups, const ShardingOptions& options,
                          cuda::DeviceContext& ctx)
      : DeviceParameterAccess<T>(segments, plan, ctx),
        host_(std::move(segments), plan, groups, options) {}

  // The device weights (compute dtype, over plan.parameter_range) and gradients (over
  // plan.gradient_range; null: forward passes only; zeroed by the caller) of the next passes.
  void bind(const T* weights, float* gradients, int backward_passes) override {
    weights_ = weights;
    gradients_ = gradients;
    if (plan_.parameters_by_segment) {  // the host gathers from a float copy of the shard
      std::vector<T> shard(plan_.parameter_range.size());
      STRATA_CUDA_CHECK(cudaMemcpyAsync(shard.data(), weights, shard.size() * sizeof(T),
                                        cudaMemcpyDeviceToHost, ctx_.stream()));
      ctx_.synchronize();
      host_weights_.resize(shard.size());
      for (std::size_t i = 0; i < shard.size(); ++i)
        host_weights_[i] = cuda::dtype_to_float(shard[i]);
    }
    if (plan_.gradients_by_segment && gradients != nullptr)
      host_gradients_.assign(plan_.gradient_range.size(), 0.0f);
    host_.bind(host_weights_.data(), gradients != nullptr ? host_gradients_.data() : nullptr,
               backward_passes);
  }

  void set_readers(std::vector<int> readers_per_segment) override {
    host_.set_readers(readers_per_segment);
    DeviceParameterAccess<T>::set_readers(std::move(readers_per_segment));
  }

  // After the step's backward passes: the reduced owned gradients onto the device.
  void finish_step() override {
    if (!plan_.gradients_by_segment) return;
    STRATA_CHECK(!host_.has_pending_gradients(), "a gradient bucket was not reduced");
    STRATA_CUDA_CHECK(cudaMemcpyAsync(gradients_, host_gradients_.data(),
                                      host_gradients_.size() * sizeof(float),
                                      cudaMemcpyHostToDevice, ctx_.stream()));
    ctx_.synchronize();  // the host vector may change once this returns
  }

  const T* acquire_weights(int index, WeightUse use) override {
    const ElementRange range = segment(index).range;
    if (!plan_.parameters_by_segment) return weights_ + range.begin;
    bool first = false;
    T* device = static_cast<T*>(
        gathered_.take(static_cast<std::size_t>(index), range.size() * sizeof(T), false, first));
    if (!first) return device;
    const float* gathered = host_.acquire_weights(index, use);
    staging_weights_.resize(range.size());
    for (std::size_t i = 0; i < range.size(); ++i)
      staging_weights_[i] = cuda::dtype_from_float<T>(gathered[i]);
    host_.release_weights(index);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(device, staging_weights_.data(), range.size() * sizeof(T),
                                      cudaMemcpyHostToDevice, ctx_.stream()));
    ctx_.synchronize();  // the staging vector is reused by the next gather
    return device;
  }

  void release_gradients(int index) override {
    if (!plan_.gradients_by_segment) return;
    const std::size_t i = static_cast<std::size_t>(index);
    if (!buckets_.leave(i)) return;
    const std::size_t size = segment(index).range.size();
    staging_gradients_.resize(size);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(staging_gradients_.data(), buckets_.data(i),
                                      size * sizeof(float), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
    float* bucket = host_.acquire_gradients(index);
    for (std::size_t k = 0; k < size; ++k) bucket[k] += staging_gradients_[k];
    host_.release_gradients(index);  // reduces the host bucket when it is due
    buckets_.free(i);
  }

  std::size_t secondary_bytes() const override { return host_.secondary_bytes(); }  // host

 private:
  ShardedParameters host_;
  std::vector<float> host_weights_, host_gradients_, staging_gradients_;
  std::vector<T> staging_weights_;
};

}  // namespace strata
