// Communicator on host memory over an MPI communicator (the CPU backend's transport).
// MpiRuntime owns MPI_Init/MPI_Finalize for the process (RAII, one per process, in main).
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace strata {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int world_rank() const;
  int world_size() const;
  // The ranks of MPI_COMM_WORLD on this rank's host, itself included: the real machine (ranks
  // that can share memory, MPI_COMM_TYPE_SHARED), not the nodes parallel.gpus_per_node simulates.
  // Collective over MPI_COMM_WORLD.
  int ranks_on_host() const;
};

// Whether MPI calls may come from several threads at once (MPI_THREAD_MULTIPLE), which
// MpiRuntime asks for.
bool mpi_thread_multiple();

class MpiCommunicator : public Communicator {
 public:
  // Wraps `comm` (not owned); collective over it (members exchange their world ranks).
  // ranks_per_node sets the link class: a peer in the same block of ranks_per_node consecutive
  // MPI_COMM_WORLD ranks is intra-node.
  MpiCommunicator(MPI_Comm comm, int ranks_per_node);
  // Frees the communicator when this object created it (subgroup).
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // A communicator over some of this one's ranks: `members` are ranks of this communicator, in
  // the order that becomes their rank in the new one (a pipeline group lists its stages in order).
  // Collective over THIS communicator: every rank calls subgroup at the same point, in the same
  // order relative to other collectives, each passing the members of its own group; the groups
  // must partition the ranks (MPI_Comm_split underneath). The result shares nothing with this
  // communicator but the link classification (world ranks and ranks_per_node), keeps its own
  // CommStats, and frees its MPI_Comm when destroyed: destroy it before MPI_Finalize.
  std::unique_ptr<MpiCommunicator> subgroup(const std::vector<int>& members);

  MPI_Comm comm() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_max(std::int64_t* data, std::size_t count) override;
  void barrier() override;

 private:
  void all_reduce_sum_of(DataType type, void* data, std::size_t count) override;
  void reduce_scatter_sum_of(DataType type, const void* in, void* out,
                             std::size_t count_per_rank) override;
  void all_gather_of(DataType type, const void* in, void* out, std::size_t count_per_rank) override;
  void all_to_all_of(DataType type, const void* in, void* out, std::size_t count_per_rank) override;
  void reduce_scatter_sum_v_of(DataType type, const void* in, void* out,
                               std::span<const std::size_t> counts) override;
  void all_gather_v_of(DataType type, const void* in, void* out,
                       std::span<const std::size_t> counts) override;
  void all_to_all_v_of(DataType type, const void* in, std::span<const std::size_t> send_counts,
                       void* out, std::span<const std::size_t> recv_counts) override;
  std::unique_ptr<PendingCollective> start_all_gather_v_of(
      DataType type, const void* in, void* out, std::span<const std::size_t> counts) override;
  void broadcast_of(DataType type, void* data, std::size_t count, int root) override;
  void send_of(DataType type, const void* data, std::size_t count, int peer) override;
  std::unique_ptr<PendingCollective> start_send_of(DataType type, const void* data,
                                                   std::size_t count, int peer, int tag) override;
  void recv_tagged_of(DataType type, void* data, std::size_t count, int peer, int tag) override;
  // Both halves posted at once (MPI_Irecv, MPI_Isend), so the transfer can progress under the
  // caller's work.
  std::unique_ptr<PendingCollective> start_ring_shift_of(DataType type, const void* send,
                                                         void* recv, std::size_t count) override;
  void recv_of(DataType type, void* data, std::size_t count, int peer) override;
  void send_recv_of(DataType type, const void* send_buf, std::size_t send_count, int dest,
                    void* recv_buf, std::size_t recv_count, int source) override;

  // An owned communicator whose members' world ranks are already known (subgroup).
  MpiCommunicator(MPI_Comm owned_comm, std::vector<int> member_world_ranks, int ranks_per_node);

  void check_peer(int peer, const char* operation) const;
  // A blocking receive of exactly `count` elements from `peer` with MPI tag `tag`.
  void receive(DataType type, void* data, std::size_t count, int peer, int tag);

  MPI_Comm comm_;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace strata
