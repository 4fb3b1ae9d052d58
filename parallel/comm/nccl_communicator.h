// NCCL communicators (docs/ARCHITECTURE.md §2: NCCL on device memory, bootstrapped over MPI): the
// collectives of one process group run GPU to GPU on device arrays, queued on a stream like
// kernels, with no host synchronisation. One is made per parallel axis from that axis's MPI
// communicator, which carries the NCCL unique id from the group's rank 0 to the others and keeps
// the accounting: every call here, count 0 included, is counted in that communicator's CommStats by
// the ring model of communicator.h, on the bytes NCCL moves. Those differ from a host-staged run's:
// a bf16 or fp16 element counts 2 bytes here where staging moves (and counts) it as fp32, and a
// maximum counts as the all_reduce it is where staging gathers. So comm_bytes depends on the
// carrier.
//
// Set-up is agreed on over the MPI group (a failure on any member makes every member throw);
// after an error, the destructor aborts the communicator rather than wait for its peers.
//
// NCCL needs a distinct GPU for every rank of a communicator; train/backend/device_choice.cpp
// decides when a run may use it (parallel.device_comm). Built only with the CUDA backend.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <memory>
#include <span>

#include "model/kernels/cuda/device_collectives.h"
#include "parallel/comm/communicator.h"

namespace strata {

class NcclCommunicator final : public cuda::DeviceCollectives {
 public:
  // Collective over `group` (not owned; it must outlive this): every member constructs it, in the
  // same order as its other communicators, with the GPU it computes on current.
  explicit NcclCommunicator(Communicator& group);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void all_reduce_max(float* data, std::size_t count, cudaStream_t stream) override;

  // Uneven chunks (counts[r] elements for member r, laid out in member order; ZeRO 2/3's segment
  // pieces): every member's chunk to every member, as grouped broadcasts; and the sum of every
  // member's chunk r to member r, as grouped reductions (fp32). Counted as the ring of
  // communicator.h over uneven chunks.
  void all_gather_v(cuda::Element element, const void* in, void* out,
                    std::span<const std::size_t> counts, cudaStream_t stream);
  void reduce_scatter_sum_v(const float* in, float* out, std::span<const std::size_t> counts,
                            cudaStream_t stream);

  // Sends `count` floats of `send` to group rank `peer` and receives as many from it into `recv`
  // (device arrays, not overlapping), as one paired operation: both ends call it.
  void exchange(const float* send, float* recv, std::size_t count, int peer, cudaStream_t stream);

 private:
  void all_reduce_sum_of(cuda::Element element, void* data, std::size_t count,
                         cudaStream_t stream) override;
  void all_gather_of(cuda::Element element, const void* in, void* out, std::size_t count,
                     cudaStream_t stream) override;
  void reduce_scatter_sum_of(cuda::Element element, const void* in, void* out, std::size_t count,
                             cudaStream_t stream) override;
  // Send to the next member and receive from the previous as one NCCL group, queued on the
  // stream: complete (in stream order) when it returns. Counted as a send to the next member.
  std::unique_ptr<PendingCollective> start_ring_shift_of(cuda::Element element, const void* send,
                                                         void* recv, std::size_t count,
                                                         cudaStream_t stream) override;

  Communicator& group_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace strata
