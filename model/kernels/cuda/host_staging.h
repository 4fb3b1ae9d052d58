// Device arrays of a compute dtype (float, __nv_bfloat16, __half) to and from host fp32 arrays,
// as everything that crosses ranks through host memory travels (the staged collectives, the
// pipeline's boundary activations): converted on the device through one fp32 buffer (exact from
// bf16/fp16 to fp32, rounded once the other way), copied with the stream, always the same one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "model/kernels/cuda/arena.h"

namespace strata::cuda {

class HostStaging {
 public:
  // Arrays of up to max_elements; the fp32 device buffer is reserved here.
  explicit HostStaging(std::size_t max_elements);

  // host (count, fp32) = device converted; waits for the stream, so `host` is ready on return.
  template <class T>
  void to_host(float* host, const T* device, std::size_t count, cudaStream_t stream);
  // device (count) = host converted, queued on the stream. Page-locked `host` is read
  // asynchronously: the caller must not rewrite it before the stream has passed this copy (a later
  // to_host on the same stream has); pageable `host` may be reused on return.
  template <class T>
  void to_device(T* device, const float* host, std::size_t count, cudaStream_t stream);

  std::size_t max_elements() const { return max_elements_; }

 private:
  // Every call must use one stream, the first one given: the fp32 buffer is reused safely only
  // because a call's conversion is queued behind the previous call's copies. Checked.
  void bind(cudaStream_t stream);

  std::size_t max_elements_;
  bool bound_ = false;
  cudaStream_t stream_ = nullptr;
  DeviceArena converted_;
  float* converted_data_;
};

}  // namespace strata::cuda
