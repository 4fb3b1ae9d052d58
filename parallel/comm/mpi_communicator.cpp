#include "parallel/comm/mpi_communicator.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "model/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#define STRATA_MPI_CHECK(call)                                                 \
  do {                                                                         \
    const int mpi_status = (call);                                             \
    if (mpi_status != MPI_SUCCESS)                                             \
      ::strata::fail("MPI call failed: " #call " at " __FILE__ ":", __LINE__); \
  } while (0)

namespace strata {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // Threads: DiLoCo's overlapped outer reduction runs on a thread of its own, on its own
  // communicator, while the main thread computes; the library says whether it can.
  int provided = MPI_THREAD_SINGLE;
#if defined(__SANITIZE_ADDRESS__)
  // Not leak-checked: what MPI_Init allocates is the library's for the process's lifetime, and
  // part of it from plugins it unloads again before the end (see ~MpiRuntime).
  __lsan::ScopedDisabler lifetime_allocations;
#endif
  if (!initialized) STRATA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
}

bool mpi_thread_multiple() {
  int provided = MPI_THREAD_SINGLE;
  STRATA_MPI_CHECK(MPI_Query_thread(&provided));
  return provided >= MPI_THREAD_MULTIPLE;
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
#if defined(__SANITIZE_ADDRESS__)
  // Sanitizer builds check for leaks here rather than at exit: MPI_Finalize unloads Open MPI's
  // and PMIx's plugins, and a lifetime allocation of an unloaded plugin has no module name left
  // for the suppressions (.ci/lsan.supp) to match when ASan unwinds fast (frame pointers only).
  if (!finalized) __lsan_do_leak_check();
#endif
  if (!finalized) MPI_Finalize();
}

int MpiRuntime::world_rank() const {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int MpiRuntime::world_size() const {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int MpiRuntime::ranks_on_host() const {
  MPI_Comm host = MPI_COMM_NULL;
  STRATA_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  int size = 1;
  MPI_Comm_size(host, &size);
  MPI_Comm_free(&host);
  return size;
}

namespace {

// Point-to-point messages of one communicator share a tag: each group has its own MPI_Comm, and
// MPI keeps messages between two ranks of one communicator and tag in order.
constexpr int kPointToPointTag = 0;

int checked_count(std::size_t count) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    fail("MPI message of ", count, " elements exceeds the int count limit");
  return static_cast<int>(count);
}

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::f32:
      return MPI_FLOAT;
    case DataType::f64:
      return MPI_DOUBLE;
    case DataType::i8:
      return MPI_INT8_T;
    case DataType::u8:
      return MPI_UINT8_T;
    case DataType::i32:
      return MPI_INT32_T;
    case DataType::i64:
      return MPI_INT64_T;
  }
  fail("MPI: unknown element type");
}

// MPI_SUM's type: Collectives refuses byte sums at compile time (model/core/data_type.h says why);
// this keeps a type-erased call from reaching MPI with one.
MPI_Datatype mpi_sum_type(DataType type) {
  STRATA_CHECK(summable(type), "bytes are never summed");
  return mpi_type(type);
}

// The bytes of `count` elements, as the accounting counts them.
std::uint64_t bytes_of(DataType type, std::size_t count) { return count * size_of(type); }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int ranks_per_node) : comm_(comm) {
  STRATA_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  STRATA_MPI_CHECK(MPI_Comm_size(comm, &size_));
  int world_rank = 0;
  STRATA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  std::vector<int> world_ranks(static_cast<std::size_t>(size_));
  STRATA_MPI_CHECK(MPI_Allgather(&world_rank, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, comm));
  set_topology(std::move(world_ranks), ranks_per_node);
}

MpiCommunicator::MpiCommunicator(MPI_Comm owned_comm, std::vector<int> member_world_ranks,
                                 int ranks_per_node)
    : comm_(owned_comm), owned_(true) {
  STRATA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  STRATA_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  set_topology(std::move(member_world_ranks), ranks_per_node);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After MPI_Finalize the handle is dead already; freeing it then would be an MPI error.
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::subgroup(const std::vector<int>& members) {
  // Local checks first: they fail identically on every rank given the same bad input, before any
  // rank enters the collective split.
  const auto self = std::find(members.begin(), members.end(), rank_);
  if (self == members.end()) fail("subgroup: this rank (", rank_, ") is not among its members");
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size_)
      fail("subgroup: member ", members[i], " is not a rank of a communicator of ", size_);
    if (std::count(members.begin(), members.end(), members[i]) != 1)
      fail("subgroup: member ", members[i], " is listed twice");
  }
  // Ranks with the same colour form one group, ordered by key: the smallest member names the group
  // (unique when the groups partition the ranks) and a member's index in the list is its rank.
  const int color = *std::min_element(members.begin(), members.end());
  const int key = static_cast<int>(self - members.begin());
  std::vector<int> world_ranks;
  for (int member : members) world_ranks.push_back(world_rank_of(member));
  MPI_Comm group_comm = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_split(comm_, color, key, &group_comm));
  auto group = std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(group_comm, std::move(world_ranks), ranks_per_node()));
  group->set_ranks_per_worker(ranks_per_worker());

  // The split only sees colours and keys: check that the ranks that met are exactly the list each
  // of them passed (in order), and let the whole group agree, so no member goes on alone.
  std::vector<int> parent_ranks(static_cast<std::size_t>(group->size_));
  STRATA_MPI_CHECK(
      MPI_Allgather(&rank_, 1, MPI_INT, parent_ranks.data(), 1, MPI_INT, group->comm_));
  int consistent = parent_ranks == members ? 1 : 0;
  STRATA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &consistent, 1, MPI_INT, MPI_MIN, group->comm_));
  if (!consistent)
    fail(
        "subgroup: the members of one group passed different member lists (groups must "
        "partition the communicator and every member must list them in the same order)");
  return group;
}

void MpiCommunicator::check_peer(int peer, const char* operation) const {
  if (peer < 0 || peer >= size_)
    fail(operation, ": peer ", peer, " is not a rank of a group of ", size_);
}

void MpiCommunicator::all_reduce_sum_of(DataType type, void* data, std::size_t count) {
  const TimedCall timed(*this, "all_reduce");
  if (size_ > 1)
    STRATA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), mpi_sum_type(type),
                                   MPI_SUM, comm_));
  count_ring("all_reduce", ring_all_reduce_bytes(bytes_of(type, count), size_));
}

void MpiCommunicator::all_reduce_max(std::int64_t* data, std::size_t count) {
  const TimedCall timed(*this, "all_reduce");
  if (size_ > 1)
    STRATA_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_INT64_T, MPI_MAX, comm_));
  count_ring("all_reduce", ring_all_reduce_bytes(count * sizeof(std::int64_t), size_));
}

void MpiCommunicator::broadcast_of(DataType type, void* data, std::size_t count, int root) {
  const TimedCall timed(*this, "broadcast");
  check_peer(root, "broadcast");
  if (size_ > 1)
    STRATA_MPI_CHECK(MPI_Bcast(data, checked_count(count), mpi_type(type), root, comm_));
  // However the broadcast is routed, the buffer crosses size−1 links in all; charging the root
  // once per other member makes the total exact and the link split that of a flat fan-out.
  if (rank_ == root)
    count_per_peer("broadcast", bytes_of(type, count));
  else
    stats_.count_call("broadcast");
}

void MpiCommunicator::barrier() {
  if (size_ > 1) STRATA_MPI_CHECK(MPI_Barrier(comm_));
}

void MpiCommunicator::reduce_scatter_sum_of(DataType type, const void* in, void* out,
                                            std::size_t count_per_rank) {
  const TimedCall timed(*this, "reduce_scatter");
  STRATA_MPI_CHECK(MPI_Reduce_scatter_block(in, out, checked_count(count_per_rank),
                                            mpi_sum_type(type), MPI_SUM, comm_));
  count_ring("reduce_scatter", ring_chunk_bytes(bytes_of(type, size_ * count_per_rank), size_));
}

void MpiCommunicator::all_gather_of(DataType type, const void* in, void* out,
                                    std::size_t count_per_rank) {
  const TimedCall timed(*this, "all_gather");
  const int count = checked_count(count_per_rank);
  // In place: this rank's contribution already sits in its chunk of out.
  const bool in_place = in == static_cast<const char*>(out) +
                                  bytes_of(type, static_cast<std::size_t>(rank_) * count_per_rank);
  STRATA_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in, count, mpi_type(type), out, count,
                                 mpi_type(type), comm_));
  count_ring("all_gather", ring_chunk_bytes(bytes_of(type, size_ * count_per_rank), size_));
}

namespace {
// MPI's int counts (and displacements) of uneven chunks; the group's size must match.
std::vector<int> checked_counts(std::span<const std::size_t> counts, int size) {
  STRATA_CHECK(static_cast<int>(counts.size()) == size, "uneven collective: ", counts.size(),
               " counts for a group of ", size);
  std::vector<int> result;
  for (std::size_t c : counts) result.push_back(checked_count(c));
  return result;
}
}  // namespace

void MpiCommunicator::reduce_scatter_sum_v_of(DataType type, const void* in, void* out,
                                              std::span<const std::size_t> counts) {
  const TimedCall timed(*this, "reduce_scatter");
  const std::vector<int> ints = checked_counts(counts, size_);
  STRATA_MPI_CHECK(MPI_Reduce_scatter(in, out, ints.data(), mpi_sum_type(type), MPI_SUM, comm_));
  count_ring("reduce_scatter", ring_reduce_scatter_v_bytes(counts, rank_, size_of(type)));
}

namespace {
// Displacements of uneven chunks laid out in rank order.
std::vector<int> displacements_of(const std::vector<int>& counts) {
  std::vector<int> displacements(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r)
    displacements[r] = checked_count(static_cast<std::size_t>(displacements[r - 1]) +
                                     static_cast<std::size_t>(counts[r - 1]));
  return displacements;
}

// An MPI_Iallgatherv in flight, with the count arrays MPI reads until it completes.
class MpiPendingGather final : public PendingCollective {
 public:
  std::vector<int> counts, displacements;
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override {
    if (request != MPI_REQUEST_NULL) STRATA_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }
  ~MpiPendingGather() override {
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
};
}  // namespace

void MpiCommunicator::all_gather_v_of(DataType type, const void* in, void* out,
                                      std::span<const std::size_t> counts) {
  const TimedCall timed(*this, "all_gather");
  const std::vector<int> ints = checked_counts(counts, size_);
  const std::vector<int> displacements = displacements_of(ints);
  STRATA_MPI_CHECK(MPI_Allgatherv(in, ints[static_cast<std::size_t>(rank_)], mpi_type(type), out,
                                  ints.data(), displacements.data(), mpi_type(type), comm_));
  count_ring("all_gather", ring_all_gather_v_bytes(counts, rank_, size_of(type)));
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_all_gather_v_of(
    DataType type, const void* in, void* out, std::span<const std::size_t> counts) {
  const TimedCall timed(*this, "all_gather");
  auto pending = std::make_unique<MpiPendingGather>();
  pending->counts = checked_counts(counts, size_);
  pending->displacements = displacements_of(pending->counts);
  STRATA_MPI_CHECK(MPI_Iallgatherv(in, pending->counts[static_cast<std::size_t>(rank_)],
                                   mpi_type(type), out, pending->counts.data(),
                                   pending->displacements.data(), mpi_type(type), comm_,
                                   &pending->request));
  count_ring("all_gather", ring_all_gather_v_bytes(counts, rank_, size_of(type)));
  return pending;
}

void MpiCommunicator::all_to_all_of(DataType type, const void* in, void* out,
                                    std::size_t count_per_rank) {
  const TimedCall timed(*this, "all_to_all");
  const int count = checked_count(count_per_rank);
  STRATA_MPI_CHECK(MPI_Alltoall(in, count, mpi_type(type), out, count, mpi_type(type), comm_));
  count_per_peer("all_to_all", bytes_of(type, count_per_rank));
}

void MpiCommunicator::all_to_all_v_of(DataType type, const void* in,
                                      std::span<const std::size_t> send_counts, void* out,
                                      std::span<const std::size_t> recv_counts) {
  const TimedCall timed(*this, "all_to_all");
  const std::vector<int> sends = checked_counts(send_counts, size_);
  const std::vector<int> receives = checked_counts(recv_counts, size_);
  const std::vector<int> send_at = displacements_of(sends), recv_at = displacements_of(receives);
  STRATA_MPI_CHECK(MPI_Alltoallv(in, sends.data(), send_at.data(), mpi_type(type), out,
                                 receives.data(), recv_at.data(), mpi_type(type), comm_));
  std::vector<std::uint64_t> bytes;
  for (std::size_t c : send_counts) bytes.push_back(bytes_of(type, c));
  count_to_each_peer("all_to_all", bytes);
}

void MpiCommunicator::send_of(DataType type, const void* data, std::size_t count, int peer) {
  const TimedCall timed(*this, "send");
  check_peer(peer, "send");
  STRATA_MPI_CHECK(
      MPI_Send(data, checked_count(count), mpi_type(type), peer, kPointToPointTag, comm_));
  count_send(peer, bytes_of(type, count));
}

void MpiCommunicator::recv_of(DataType type, void* data, std::size_t count, int peer) {
  const TimedCall timed(*this, "recv");
  check_peer(peer, "recv");
  receive(type, data, count, peer, kPointToPointTag);
}

void MpiCommunicator::receive(DataType type, void* data, std::size_t count, int peer, int tag) {
  MPI_Status status;
  STRATA_MPI_CHECK(MPI_Recv(data, checked_count(count), mpi_type(type), peer, tag, comm_, &status));
  // A shorter message would leave the tail of `data` stale without any MPI error.
  int received = 0;
  STRATA_MPI_CHECK(MPI_Get_count(&status, mpi_type(type), &received));
  if (static_cast<std::size_t>(received) != count)
    fail("recv: expected ", count, " elements from rank ", peer, ", got ", received);
}

namespace {
// Tagged messages sit above the ordered point-to-point tag.
int message_tag(int tag) {
  STRATA_CHECK(tag >= 0 && tag < Communicator::kMaxMessageTag, "message tag ", tag,
               " out of range");
  return kPointToPointTag + 1 + tag;
}

// An MPI_Isend in flight.
class MpiPendingSend final : public PendingCollective {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override {
    if (request != MPI_REQUEST_NULL) STRATA_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }
  ~MpiPendingSend() override {
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
};
}  // namespace

std::unique_ptr<PendingCollective> MpiCommunicator::start_send_of(DataType type, const void* data,
                                                                  std::size_t count, int peer,
                                                                  int tag) {
  const TimedCall timed(*this, "send");
  check_peer(peer, "send");
  auto pending = std::make_unique<MpiPendingSend>();
  STRATA_MPI_CHECK(MPI_Isend(data, checked_count(count), mpi_type(type), peer, message_tag(tag),
                             comm_, &pending->request));
  count_send(peer, bytes_of(type, count));
  return pending;
}

void MpiCommunicator::recv_tagged_of(DataType type, void* data, std::size_t count, int peer,
                                     int tag) {
  const TimedCall timed(*this, "recv");
  check_peer(peer, "recv");
  receive(type, data, count, peer, message_tag(tag));
}

namespace {
class MpiPendingShift final : public PendingCollective {
 public:
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // receive, send
  void wait() override { STRATA_MPI_CHECK(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE)); }
  ~MpiPendingShift() override { MPI_Waitall(2, requests, MPI_STATUSES_IGNORE); }
};
}  // namespace

std::unique_ptr<PendingCollective> MpiCommunicator::start_ring_shift_of(DataType type,
                                                                        const void* send,
                                                                        void* recv,
                                                                        std::size_t count) {
  const TimedCall timed(*this, "send");
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  auto pending = std::make_unique<MpiPendingShift>();
  STRATA_MPI_CHECK(MPI_Irecv(recv, checked_count(count), mpi_type(type), previous,
                             message_tag(kRingShiftTag), comm_, &pending->requests[0]));
  STRATA_MPI_CHECK(MPI_Isend(send, checked_count(count), mpi_type(type), next,
                             message_tag(kRingShiftTag), comm_, &pending->requests[1]));
  count_send(next, bytes_of(type, count));
  return pending;
}

void MpiCommunicator::send_recv_of(DataType type, const void* send_buf, std::size_t send_count,
                                   int dest, void* recv_buf, std::size_t recv_count, int source) {
  const TimedCall timed(*this, "send");
  if (dest != -1) check_peer(dest, "send_recv");
  if (source != -1) check_peer(source, "send_recv");
  MPI_Status status;
  STRATA_MPI_CHECK(MPI_Sendrecv(send_buf, dest == -1 ? 0 : checked_count(send_count),
                                mpi_type(type), dest == -1 ? MPI_PROC_NULL : dest, kPointToPointTag,
                                recv_buf, source == -1 ? 0 : checked_count(recv_count),
                                mpi_type(type), source == -1 ? MPI_PROC_NULL : source,
                                kPointToPointTag, comm_, &status));
  if (source != -1) {
    int received = 0;
    STRATA_MPI_CHECK(MPI_Get_count(&status, mpi_type(type), &received));
    if (static_cast<std::size_t>(received) != recv_count)
      fail("send_recv: expected ", recv_count, " elements from rank ", source, ", got ", received);
  }
  if (dest != -1) count_send(dest, bytes_of(type, send_count));
}

}  // namespace strata
