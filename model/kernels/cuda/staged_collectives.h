// Collectives on device arrays (device_collectives.h), staged through page-locked host memory over
// a host Collectives (model/core/collectives.h; the MPI communicator in a run). This is how several
// ranks share one GPU, where NCCL cannot run (it needs one device per rank): each call converts
// the device array to fp32 (bf16 and fp16 are exact in fp32), copies it to the host, waits for the
// stream, runs the host collective, and copies the result back, converted to the array's dtype
// (rounded once). Sums therefore accumulate in fp32 whatever the compute dtype.
//
// Every call synchronises the stream: these are the host synchronisations of a tensor-parallel
// step, a cost the GPU-direct collectives of NCCL would remove. A ring shift stages its block out
// and starts the host transfer, and its wait() completes it and queues the copy in: the stream
// may run other work (context parallelism's attention on the previous block) meanwhile. A group of
// one rank is a device copy (or nothing), never a host round trip.
//
// All staging memory is reserved at construction for arrays of up to `max_elements` (the largest
// gathered array: B·T·C of the model for tensor parallelism, its K/V blocks for context
// parallelism); no allocation happens in a step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "model/core/collectives.h"
#include "model/kernels/cuda/device_buffer.h"
#include "model/kernels/cuda/device_collectives.h"
#include "model/kernels/cuda/host_staging.h"

namespace strata::cuda {

class StagedCollectives final : public DeviceCollectives {
 public:
  // `group` is not owned and must outlive this object. Counts are per call; the whole array
  // (size()·count for the chunked collectives) must fit in max_elements.
  StagedCollectives(Collectives& group, std::size_t max_elements);
  StagedCollectives(const StagedCollectives&) = delete;
  StagedCollectives& operator=(const StagedCollectives&) = delete;

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void all_reduce_max(float* data, std::size_t count, cudaStream_t stream) override;

 private:
  void all_reduce_sum_of(Element element, void* data, std::size_t count,
                         cudaStream_t stream) override;
  void all_gather_of(Element element, const void* in, void* out, std::size_t count,
                     cudaStream_t stream) override;
  void reduce_scatter_sum_of(Element element, const void* in, void* out, std::size_t count,
                             cudaStream_t stream) override;
  std::unique_ptr<PendingCollective> start_ring_shift_of(Element element, const void* send,
                                                         void* recv, std::size_t count,
                                                         cudaStream_t stream) override;
  template <class T>
  void staged_all_reduce_sum(T* data, std::size_t count, cudaStream_t stream);
  template <class T>
  void staged_all_gather(const T* in, T* out, std::size_t count, cudaStream_t stream);
  template <class T>
  void staged_reduce_scatter_sum(const T* in, T* out, std::size_t count, cudaStream_t stream);
  template <class T>
  std::unique_ptr<PendingCollective> staged_ring_shift(const T* send, T* recv, std::size_t count,
                                                       cudaStream_t stream);
  // A group of one: `out` = `in` on the device (nothing when they are the same array).
  template <class T>
  static void copy_alone(const T* in, T* out, std::size_t count, cudaStream_t stream);
  // Error unless an array of `elements` fits the staging memory.
  void check_room(const char* collective, std::size_t elements) const;

  Collectives& group_;
  HostStaging staging_;       // device arrays ↔ host fp32
  PinnedBuffer<float> host_;  // 2·max_elements: a chunked collective's input and output
};

}  // namespace strata::cuda
