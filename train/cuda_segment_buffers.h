// What the CUDA ZeRO paths (cuda_staged_sharding.h: through the host; cuda_nccl_sharding.h: over
// NCCL) share: the interface the backend drives them by (DeviceParameterAccess), and the device
// buffers of parameter segments (DeviceSegmentBuffers): one buffer per segment (gathered weights,
// or a gradient bucket), allocated by its first user and freed after its last, both stream-ordered
// on the compute stream (cudaMallocAsync / cudaFreeAsync), so a buffer is freed only after the
// kernels queued before the free have read it. Counts the bytes held and their peak. Built only
// with the CUDA backend. Status: compiled for sm_90a, never run on a GPU (untested).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"
#include "model/parameter_access.h"

namespace strata {

// A ParameterAccess over device weights (compute dtype T) and fp32 gradients, bound for each
// step's (or evaluation's) passes.
template <class T>
class DeviceParameterAccess : public ParameterAccess<T, float> {
 public:
  // The device weights over plan.parameter_range and gradients over plan.gradient_range (zeroed
  // by the caller; null: forward passes only) of the next passes; `backward_passes`: how many
  // backward passes the step runs (its micro-batches).
  virtual void bind(const T* weights, float* gradients, int backward_passes) = 0;
  // After the step's backward passes: every segment's gradients reduced into the bound buffer.
  virtual void finish_step() = 0;
  // Peaks so far of the gathered weights and the gradient buckets (device), and the bytes of the
  // hpZ node copies.
  virtual std::size_t peak_gathered_bytes() const = 0;
  virtual std::size_t peak_bucket_bytes() const = 0;
  virtual std::size_t secondary_bytes() const = 0;
};

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

}  // namespace strata
