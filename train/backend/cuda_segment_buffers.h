// What the CUDA ZeRO paths (cuda_staged_sharding.h: through the host; cuda_nccl_sharding.h: over
// NCCL) share: the device buffers of parameter segments (DeviceSegmentBuffers) and the base the
// backend drives them by (DeviceParameterAccess). DeviceSegmentBuffers: one buffer per segment
// (gathered weights, or a gradient bucket), allocated by its first user and freed after its last,
// both stream-ordered on the compute stream (cudaMallocAsync / cudaFreeAsync), so a buffer is freed
// only after the kernels queued before the free have read it. Counts the bytes held and their peak.
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
#include "model/parameter_access.h"
#include "parallel/mesh/reduction_plan.h"

namespace strata {

class DeviceSegmentBuffers {
 public:
  DeviceSegmentBuffers(std::size_t segments, cudaStream_t stream)
      : held_(segments), stream_(stream) {}
  ~DeviceSegmentBuffers() {
    for (Held& h : held_)
      if (h.data != nullptr) cudaFreeAsync(h.data, stream_);
  }
  DeviceSegmentBuffers(const DeviceSegmentBuffers&) = delete;
  DeviceSegmentBuffers& operator=(const DeviceSegmentBuffers&) = delete;

  // Segment i's buffer of `bytes`, one more user; `first` says whether it was allocated now
  // (zeroed when `zero`). A buffer whose users all left but that was not freed (a gradient bucket
  // kept across micro-batches) is taken again as it is.
  void* take(std::size_t i, std::size_t bytes, bool zero, bool& first) {
    Held& h = held_.at(i);
    first = h.data == nullptr;
    ++h.users;
    if (first) {
      STRATA_CUDA_CHECK(cudaMallocAsync(&h.data, std::max<std::size_t>(bytes, 1), stream_));
      if (zero) STRATA_CUDA_CHECK(cudaMemsetAsync(h.data, 0, bytes, stream_));
      h.bytes = bytes;
      live_ += bytes;
      peak_ = std::max(peak_, live_);
    }
    return h.data;
  }
  // One user fewer; true when it was the last (the buffer is still there: free() it).
  bool leave(std::size_t i) {
    Held& h = held_.at(i);
    STRATA_CHECK(h.users > 0, "segment buffer ", i, " released more often than taken");
    return --h.users == 0;
  }
  void free(std::size_t i) {
    Held& h = held_.at(i);
    STRATA_CUDA_CHECK(cudaFreeAsync(h.data, stream_));  // after the kernels queued before
    h.data = nullptr;
    live_ -= h.bytes;
    h.bytes = 0;
  }
  void* data(std::size_t i) const { return held_.at(i).data; }
  bool holds_any() const {
    return std::any_of(held_.begin(), held_.end(), [](const Held& h) { return h.data != nullptr; });
  }
  std::size_t peak_bytes() const { return peak_; }

 private:
  struct Held {
    void* data = nullptr;
    std::size_t bytes = 0;
    int users = 0;
  };
  std::vector<Held> held_;
  cudaStream_t stream_;
  std::size_t live_ = 0, peak_ = 0;
};

// A ParameterAccess over device weights (compute dtype T) and fp32 gradients, bound for each
// step's (or evaluation's) passes, with what both CUDA paths share: the segments and the plan,
// the bound buffers, the device buffers of gathered weights and gradient buckets, and the calls
// that do not depend on how segments travel (releasing weights, handing out a bucket).
template <class T>
class DeviceParameterAccess : public ParameterAccess<T, float> {
 public:
  DeviceParameterAccess(std::vector<ParameterSegment> segments, const ReductionPlan& plan,
                        cuda::DeviceContext& ctx)
      : segments_(std::move(segments)),
        plan_(plan),
        ctx_(ctx),
        gathered_(segments_.size(), ctx.stream()),
        buckets_(segments_.size(), ctx.stream()),
        readers_(segments_.size(), 1) {}

  // The device weights over plan.parameter_range and gradients over plan.gradient_range (zeroed
  // by the caller; null: forward passes only) of the next passes; `backward_passes`: how many
  // backward passes the step runs (its micro-batches).
  virtual void bind(const T* weights, float* gradients, int backward_passes) = 0;
  // After the step's backward passes: every segment's gradients reduced into the bound buffer.
  virtual void finish_step() = 0;
  // The bytes of the hpZ node copies.
  virtual std::size_t secondary_bytes() const = 0;
  // How many models read each segment (default 1 each): a segment two chunks of a rank share
  // (zbv's tied wte, model/chunk_parameters.h) has its gradients released twice per backward
  // pass, and its bucket is due after them all.
  virtual void set_readers(std::vector<int> readers_per_segment) {
    STRATA_CHECK(readers_per_segment.size() == segments_.size(), "readers of ",
                 readers_per_segment.size(), " segments for ", segments_.size());
    readers_ = std::move(readers_per_segment);
  }
  // Peaks so far of the gathered weights and the gradient buckets on the device.
  std::size_t peak_gathered_bytes() const { return gathered_.peak_bytes(); }
  std::size_t peak_bucket_bytes() const { return buckets_.peak_bytes(); }

  void release_weights(int index) final {
    if (!plan_.parameters_by_segment) return;
    if (gathered_.leave(static_cast<std::size_t>(index)))
      gathered_.free(static_cast<std::size_t>(index));
  }
  // The bound buffer's segment, or (ZeRO 2, 3) the segment's zeroed bucket.
  float* acquire_gradients(int index) final {
    STRATA_CHECK(gradients_ != nullptr, "a backward pass without a gradient buffer");
    const ElementRange range = segment(index).range;
    if (!plan_.gradients_by_segment) return gradients_ + range.begin;
    bool first = false;
    return static_cast<float*>(
        buckets_.take(static_cast<std::size_t>(index), range.size() * sizeof(float), true, first));
  }

 protected:
  const ParameterSegment& segment(int index) const {
    return segments_.at(static_cast<std::size_t>(index));
  }

  std::vector<ParameterSegment> segments_;
  const ReductionPlan& plan_;
  cuda::DeviceContext& ctx_;
  const T* weights_ = nullptr;
  float* gradients_ = nullptr;
  DeviceSegmentBuffers gathered_, buckets_;  // on the device: gathered weights, gradient buckets
  std::vector<int> readers_;                 // per segment
};

}  // namespace strata
