// Communicator on host memory over an MPI communicator (the CPU backend's transport).
// MpiRuntime owns MPI_Init/MPI_Finalize for the process (RAII, one per process, in main).
#pragma once

#include <mpi.h>

#include "parallel/communicator.h"

namespace strata {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int world_rank() const;
  int world_size() const;
};

class MpiCommunicator : public Communicator {
 public:
  // Wraps `comm` (not owned). ranks_per_node sets the link class: a peer in the same block of
  // ranks_per_node consecutive world ranks is intra-node.
  MpiCommunicator(MPI_Comm comm, int ranks_per_node);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, std::size_t count) override;
  void all_reduce_sum(double* data, std::size_t count) override;
  void all_reduce_max(std::int64_t* data, std::size_t count) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;

 private:
  // Accounts a ring-style collective: each rank sends 2·(n−1)/n of the buffer for an
  // all-reduce; the link class is inter-node when the group spans more than one node.
  void record(const std::string& kind, std::uint64_t sent);
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool spans_nodes_ = false;
};

}  // namespace strata
