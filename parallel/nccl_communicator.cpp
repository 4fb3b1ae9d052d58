// Status: compiled for sm_90a, never run (a GPU per rank was never available): untested.
#include "parallel/nccl_communicator.h"

#include <iostream>

#include "model/core/error.h"

namespace strata {
namespace {

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file,
                                   int line) {
  const char* detail = ncclGetLastError(nullptr);
  fail("NCCL call ", call, " failed at ", file, ":", line, ": ", ncclGetErrorString(status),
       detail != nullptr && *detail != '\0' ? " (" : "", detail != nullptr ? detail : "",
       detail != nullptr && *detail != '\0' ? ")" : "");
}

#define STRATA_NCCL_CHECK(call)                                         \
  do {                                                                  \
    const ncclResult_t strata_nccl_status_ = (call);                    \
    if (strata_nccl_status_ != ncclSuccess)                             \
      throw_nccl_error(strata_nccl_status_, #call, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(cuda::Element element) {
  switch (element) {
    case cuda::Element::f32:
      return ncclFloat32;
    case cuda::Element::bf16:
      return ncclBfloat16;
    case cuda::Element::f16:
      return ncclFloat16;
  }
  fail("NCCL: unknown element type");
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& group) : group_(group) {
  ncclUniqueId id{};
  if (group.rank() == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
  group.broadcast(&id, sizeof id, 0);
  STRATA_NCCL_CHECK(ncclCommInitRank(&comm_, group.size(), id, group.rank()));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  const ncclResult_t status = ncclCommDestroy(comm_);
  if (status != ncclSuccess)  // destructors report, never throw
    std::cerr << "error: ncclCommDestroy failed: " << ncclGetErrorString(status) << "\n";
}

void NcclCommunicator::all_reduce_sum_of(cuda::Element element, void* data, std::size_t count,
                                         cudaStream_t stream) {
  if (count == 0) return;
  STRATA_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(element), ncclSum, comm_, stream));
  group_.count_device_ring("all_reduce",
                           ring_all_reduce_bytes(count * cuda::element_bytes(element), size()));
}

void NcclCommunicator::all_gather_of(cuda::Element element, const void* in, void* out,
                                     std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  // In place when `in` is this rank's chunk of `out`: NCCL's own in-place convention.
  STRATA_NCCL_CHECK(ncclAllGather(in, out, count, nccl_type(element), comm_, stream));
  const std::size_t whole = static_cast<std::size_t>(size()) * count;
  group_.count_device_ring("all_gather",
                           ring_chunk_bytes(whole * cuda::element_bytes(element), size()));
}

void NcclCommunicator::reduce_scatter_sum_of(cuda::Element element, const void* in, void* out,
                                             std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  STRATA_NCCL_CHECK(ncclReduceScatter(in, out, count, nccl_type(element), ncclSum, comm_, stream));
  const std::size_t whole = static_cast<std::size_t>(size()) * count;
  group_.count_device_ring("reduce_scatter",
                           ring_chunk_bytes(whole * cuda::element_bytes(element), size()));
}

void NcclCommunicator::all_reduce_max(float* data, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  STRATA_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclMax, comm_, stream));
  group_.count_device_ring("all_reduce", ring_all_reduce_bytes(count * sizeof(float), size()));
}

void NcclCommunicator::exchange(const float* send, float* recv, std::size_t count, int peer,
                                cudaStream_t stream) {
  STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "NCCL exchange with group rank ", peer,
               " of ", size(), " from rank ", rank());
  if (count == 0) return;
  // Grouped, so neither end waits for the other's receive to be posted first.
  STRATA_NCCL_CHECK(ncclGroupStart());
  STRATA_NCCL_CHECK(ncclSend(send, count, ncclFloat32, peer, comm_, stream));
  STRATA_NCCL_CHECK(ncclRecv(recv, count, ncclFloat32, peer, comm_, stream));
  STRATA_NCCL_CHECK(ncclGroupEnd());
  group_.count_device_send(peer, count * sizeof(float));
}

}  // namespace strata
