#include "parallel/comm/nccl_communicator.h"

#include <cstdint>
#include <exception>
#include <iostream>
#include <string>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"

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
  // Set-up is agreed on: a rank that fails tells the others, and every member then throws, so no
  // member waits in a later collective for a peer that has given up. Not covered: a rank whose
  // ncclCommInitRank fails before connecting can leave its peers waiting inside theirs (NCCL's
  // bootstrap has no time limit here; a non-blocking init polled against a deadline would).
  struct {
    std::int32_t ok = 1;
    ncclUniqueId id{};
  } offer;
  std::string failure;
  if (group.rank() == 0) {
    const ncclResult_t status = ncclGetUniqueId(&offer.id);
    if (status != ncclSuccess) {
      offer.ok = 0;
      failure = std::string("ncclGetUniqueId: ") + ncclGetErrorString(status);
    }
  }
  group.broadcast(&offer, sizeof offer, 0);
  if (offer.ok == 0) {
    fail("NCCL set-up over a group of ", group.size(), " failed on its rank 0",
         failure.empty() ? "" : " (", failure, failure.empty() ? "" : ")");
  }
  const ncclResult_t status = ncclCommInitRank(&comm_, group.size(), offer.id, group.rank());
  if (status != ncclSuccess) comm_ = nullptr;
  // Lowest failing group rank, or size() when every rank succeeded.
  std::int64_t first_failure = status == ncclSuccess ? group.size() : group.rank();
  std::int64_t negated = -first_failure;
  group.all_reduce_max(&negated, 1);
  first_failure = -negated;
  if (first_failure < group.size()) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    fail("NCCL set-up over a group of ", group.size(), " failed on its rank ", first_failure,
         status != ncclSuccess ? std::string(" (here: ") + ncclGetErrorString(status) + ")" : "");
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // Unwinding from an error, peers may be inside a collective this rank will never join: abort
  // rather than wait for them. Otherwise destroy, which completes the queued work first.
  const bool unwinding = std::uncaught_exceptions() > 0;
  const ncclResult_t status = unwinding ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  if (status != ncclSuccess)  // destructors report, never throw
    std::cerr << "error: " << (unwinding ? "ncclCommAbort" : "ncclCommDestroy")
              << " failed: " << ncclGetErrorString(status) << "\n";
}

void NcclCommunicator::all_reduce_sum_of(cuda::Element element, void* data, std::size_t count,
                                         cudaStream_t stream) {
  if (count > 0)
    STRATA_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(element), ncclSum, comm_, stream));
  group_.count_device_ring("all_reduce",
                           ring_all_reduce_bytes(count * cuda::element_bytes(element), size()));
}

void NcclCommunicator::all_gather_of(cuda::Element element, const void* in, void* out,
                                     std::size_t count, cudaStream_t stream) {
  // In place when `in` is this rank's chunk of `out`: NCCL's own in-place convention.
  if (count > 0)
    STRATA_NCCL_CHECK(ncclAllGather(in, out, count, nccl_type(element), comm_, stream));
  const std::size_t whole = static_cast<std::size_t>(size()) * count;
  group_.count_device_ring("all_gather",
                           ring_chunk_bytes(whole * cuda::element_bytes(element), size()));
}

void NcclCommunicator::reduce_scatter_sum_of(cuda::Element element, const void* in, void* out,
                                             std::size_t count, cudaStream_t stream) {
  if (count > 0)
    STRATA_NCCL_CHECK(
        ncclReduceScatter(in, out, count, nccl_type(element), ncclSum, comm_, stream));
  const std::size_t whole = static_cast<std::size_t>(size()) * count;
  group_.count_device_ring("reduce_scatter",
                           ring_chunk_bytes(whole * cuda::element_bytes(element), size()));
}

std::unique_ptr<PendingCollective> NcclCommunicator::start_ring_shift_of(
    cuda::Element element, const void* send, void* recv, std::size_t count, cudaStream_t stream) {
  const int next = (rank() + 1) % size(), previous = (rank() + size() - 1) % size();
  const std::size_t bytes = count * cuda::element_bytes(element);
  if (size() == 1) {
    if (count > 0 && send != recv)
      STRATA_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream));
    return std::make_unique<CompletedCollective>();
  }
  if (count > 0) {
    // Grouped, so no member waits for its successor's receive to be posted; the group is closed
    // whatever failed inside it, then the first failure is reported.
    STRATA_NCCL_CHECK(ncclGroupStart());
    const ncclResult_t sent = ncclSend(send, count, nccl_type(element), next, comm_, stream);
    const ncclResult_t received =
        sent == ncclSuccess ? ncclRecv(recv, count, nccl_type(element), previous, comm_, stream)
                            : sent;
    const ncclResult_t ended = ncclGroupEnd();
    if (sent != ncclSuccess) throw_nccl_error(sent, "ncclSend", __FILE__, __LINE__);
    if (received != ncclSuccess) throw_nccl_error(received, "ncclRecv", __FILE__, __LINE__);
    if (ended != ncclSuccess) throw_nccl_error(ended, "ncclGroupEnd", __FILE__, __LINE__);
  }
  group_.count_device_send(next, bytes);
  return std::make_unique<CompletedCollective>();
}

namespace {
// Runs `one(r, offset)` for every member r inside one NCCL group (the calls are queued together,
// so no member waits for another's turn); the group is closed whatever failed, then the first
// failure is reported.
template <class Call>
void grouped_over_members(std::span<const std::size_t> counts, int size, const char* what,
                          Call one) {
  STRATA_CHECK(static_cast<int>(counts.size()) == size, what, ": ", counts.size(),
               " counts for a group of ", size);
  STRATA_NCCL_CHECK(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  std::size_t offset = 0;
  for (int r = 0; r < size; ++r) {
    const ncclResult_t result = one(r, offset);
    if (first == ncclSuccess) first = result;
    offset += counts[static_cast<std::size_t>(r)];
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (first != ncclSuccess) throw_nccl_error(first, what, __FILE__, __LINE__);
  if (ended != ncclSuccess) throw_nccl_error(ended, "ncclGroupEnd", __FILE__, __LINE__);
}
}  // namespace

void NcclCommunicator::all_gather_v(cuda::Element element, const void* in, void* out,
                                    std::span<const std::size_t> counts, cudaStream_t stream) {
  const std::size_t bytes = cuda::element_bytes(element);
  grouped_over_members(counts, size(), "ncclBroadcast", [&](int r, std::size_t offset) {
    char* chunk = static_cast<char*>(out) + offset * bytes;
    const void* send = r == rank() ? in : chunk;  // read at the root only
    return ncclBroadcast(send, chunk, counts[static_cast<std::size_t>(r)], nccl_type(element), r,
                         comm_, stream);
  });
  group_.count_device_ring("all_gather", ring_all_gather_v_bytes(counts, rank(), bytes));
}

void NcclCommunicator::reduce_scatter_sum_v(const float* in, float* out,
                                            std::span<const std::size_t> counts,
                                            cudaStream_t stream) {
  grouped_over_members(counts, size(), "ncclReduce", [&](int r, std::size_t offset) {
    // The result lands at the root only; the others' out is not written.
    return ncclReduce(in + offset, out, counts[static_cast<std::size_t>(r)], ncclFloat32, ncclSum,
                      r, comm_, stream);
  });
  group_.count_device_ring("reduce_scatter",
                           ring_reduce_scatter_v_bytes(counts, rank(), sizeof(float)));
}

void NcclCommunicator::all_reduce_max(float* data, std::size_t count, cudaStream_t stream) {
  if (count > 0)
    STRATA_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclMax, comm_, stream));
  group_.count_device_ring("all_reduce", ring_all_reduce_bytes(count * sizeof(float), size()));
}

void NcclCommunicator::exchange(const float* send, float* recv, std::size_t count, int peer,
                                cudaStream_t stream) {
  STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "NCCL exchange with group rank ", peer,
               " of ", size(), " from rank ", rank());
  if (count > 0) {
    // Grouped, so neither end waits for the other's receive to be posted first. The group is
    // closed whatever failed inside it, then the first failure is reported.
    STRATA_NCCL_CHECK(ncclGroupStart());
    const ncclResult_t sent = ncclSend(send, count, ncclFloat32, peer, comm_, stream);
    const ncclResult_t received =
        sent == ncclSuccess ? ncclRecv(recv, count, ncclFloat32, peer, comm_, stream) : sent;
    const ncclResult_t ended = ncclGroupEnd();
    if (sent != ncclSuccess) throw_nccl_error(sent, "ncclSend", __FILE__, __LINE__);
    if (received != ncclSuccess) throw_nccl_error(received, "ncclRecv", __FILE__, __LINE__);
    if (ended != ncclSuccess) throw_nccl_error(ended, "ncclGroupEnd", __FILE__, __LINE__);
  }
  group_.count_device_send(peer, count * sizeof(float));
}

}  // namespace strata
