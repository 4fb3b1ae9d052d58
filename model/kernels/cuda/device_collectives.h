// The collectives of a group of ranks on device arrays, queued on a stream: what the CUDA model's
// tensor parallelism and the device gradient reductions need, whatever carries them. Two carriers:
//   StagedCollectives (staged_collectives.h): through page-locked host memory over the MPI
//     communicator; works when several ranks share a GPU, costs a stream synchronisation per call.
//   NcclCommunicator (parallel/comm/nccl_communicator.h): GPU to GPU over NCCL, asynchronous on the
//     stream; needs one GPU per rank.
// The semantics are those of model/core/collectives.h, on device arrays of T = float,
// __nv_bfloat16 or __half:
//   all_reduce_sum:     data (count) = the element-wise sum over the group, in place
//   all_gather:         out (size·count), chunk r = rank r's in (count); in may be out's chunk
//                       rank() (in place)
//   reduce_scatter_sum: out (count) = this rank's chunk of the sum of every rank's in (size·count)
//   all_reduce_max:     data (count, fp32) = the element-wise maximum over the group, in place
//   start_ring_shift:   recv (count) = rank (r − 1 + size) % size's send (count), started; the
//                       PendingCollective's wait() completes it (recv then holds the block, or the
//                       copy bringing it is queued on the stream); send and recv untouched until
//                       then
// Every member calls every collective, in the same order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "model/core/collectives.h"

namespace strata::cuda {

// The element types the collectives carry.
enum class Element { f32, bf16, f16 };

template <class T>
constexpr Element element_of() {
  if constexpr (std::is_same_v<T, float>)
    return Element::f32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return Element::bf16;
  else {
    static_assert(std::is_same_v<T, __half>, "collectives carry float, __nv_bfloat16 or __half");
    return Element::f16;
  }
}

constexpr std::size_t element_bytes(Element e) { return e == Element::f32 ? 4 : 2; }

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  template <class T>
  void all_reduce_sum(T* data, std::size_t count, cudaStream_t stream) {
    all_reduce_sum_of(element_of<T>(), data, count, stream);
  }
  template <class T>
  void all_gather(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    all_gather_of(element_of<T>(), in, out, count, stream);
  }
  template <class T>
  void reduce_scatter_sum(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    reduce_scatter_sum_of(element_of<T>(), in, out, count, stream);
  }
  virtual void all_reduce_max(float* data, std::size_t count, cudaStream_t stream) = 0;
  template <class T>
  std::unique_ptr<PendingCollective> start_ring_shift(const T* send, T* recv, std::size_t count,
                                                      cudaStream_t stream) {
    return start_ring_shift_of(element_of<T>(), send, recv, count, stream);
  }

 protected:
  // The typed calls above, with the element type as a value (count elements of `element`).
  virtual void all_reduce_sum_of(Element element, void* data, std::size_t count,
                                 cudaStream_t stream) = 0;
  virtual void all_gather_of(Element element, const void* in, void* out, std::size_t count,
                             cudaStream_t stream) = 0;
  virtual void reduce_scatter_sum_of(Element element, const void* in, void* out, std::size_t count,
                                     cudaStream_t stream) = 0;
  virtual std::unique_ptr<PendingCollective> start_ring_shift_of(Element element, const void* send,
                                                                 void* recv, std::size_t count,
                                                                 cudaStream_t stream) = 0;
};

}  // namespace strata::cuda
