#include "parallel/mpi_communicator.h"

#include <limits>
#include <vector>

#include "model/core/error.h"

#define STRATA_MPI_CHECK(call)                                                 \
  do {                                                                         \
    const int mpi_status = (call);                                             \
    if (mpi_status != MPI_SUCCESS)                                             \
      ::strata::fail("MPI call failed: " #call " at " __FILE__ ":", __LINE__); \
  } while (0)

namespace strata {

std::uint64_t CommStats::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [kind, by_link] : bytes)
    for (const auto& [link, n] : by_link) total += n;
  return total;
}

void CommStats::add(const std::string& kind, LinkClass link, std::uint64_t sent) {
  bytes[kind][link] += sent;
  calls[kind] += 1;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) STRATA_MPI_CHECK(MPI_Init(argc, argv));
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
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

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int ranks_per_node) : comm_(comm) {
  STRATA_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  STRATA_MPI_CHECK(MPI_Comm_size(comm, &size_));
  // The group spans nodes when its members' world ranks fall into more than one node block.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::vector<int> world_ranks(static_cast<std::size_t>(size_));
  STRATA_MPI_CHECK(MPI_Allgather(&world_rank, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, comm));
  for (int r : world_ranks) spans_nodes_ |= (r / ranks_per_node) != (world_rank / ranks_per_node);
}

void MpiCommunicator::record(const std::string& kind, std::uint64_t sent) {
  stats_.add(kind, spans_nodes_ ? LinkClass::inter_node : LinkClass::intra_node, sent);
}

namespace {
int checked_count(std::size_t count) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    fail("MPI message of ", count, " elements exceeds the int count limit");
  return static_cast<int>(count);
}
// Bytes one rank sends in a ring all-reduce of `bytes`: reduce-scatter + all-gather.
std::uint64_t ring_all_reduce_bytes(std::uint64_t bytes, int n) {
  return n <= 1 ? 0 : 2 * bytes * static_cast<std::uint64_t>(n - 1) / static_cast<std::uint64_t>(n);
}
}  // namespace

void MpiCommunicator::all_reduce_sum(float* data, std::size_t count) {
  if (size_ > 1)
    STRATA_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_FLOAT, MPI_SUM, comm_));
  record("all_reduce", ring_all_reduce_bytes(count * sizeof(float), size_));
}

void MpiCommunicator::all_reduce_sum(double* data, std::size_t count) {
  if (size_ > 1)
    STRATA_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_DOUBLE, MPI_SUM, comm_));
  record("all_reduce", ring_all_reduce_bytes(count * sizeof(double), size_));
}

void MpiCommunicator::all_reduce_max(std::int64_t* data, std::size_t count) {
  if (size_ > 1)
    STRATA_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_INT64_T, MPI_MAX, comm_));
  record("all_reduce", ring_all_reduce_bytes(count * sizeof(std::int64_t), size_));
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  if (size_ > 1) STRATA_MPI_CHECK(MPI_Bcast(data, checked_count(bytes), MPI_BYTE, root, comm_));
  // A tree broadcast sends the buffer size−1 times in all; the root is charged for it here.
  if (rank_ == root) record("broadcast", bytes * static_cast<std::uint64_t>(size_ - 1));
}

void MpiCommunicator::barrier() {
  if (size_ > 1) STRATA_MPI_CHECK(MPI_Barrier(comm_));
}

}  // namespace strata
