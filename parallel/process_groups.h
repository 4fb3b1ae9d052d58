// The communicators of one rank's parallel groups (DESIGN §2), built from the mesh: world, tp
// (same dp and pp), dp (same tp and pp), pp (same tp and dp, by stage) and node (the ranks of this
// rank's node, for hierarchical schemes such as ZeRO++). Group rank i is the i-th world rank of
// the matching Mesh group, so tp().rank() == mesh.tp_rank() and so on.
//
// Communication figures: each group communicator keeps its own CommStats, so traffic can be read
// per group (tp().stats() is the tensor-parallel traffic); total_stats() sums all five for the
// per-step `comm_bytes` of metrics.jsonl, and reset_stats() clears all five. Link classes are
// those of world ranks in every group, so the sums by link class are meaningful.
#pragma once

#include <memory>

#include "parallel/communicator.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"

namespace strata {

class ProcessGroups {
 public:
  // Collective over `world` (which must be MPI_COMM_WORLD-ordered: its rank i is world rank i,
  // with ranks_per_node == mesh.gpus_per_node()): every rank builds its ProcessGroups at the same
  // point. `world` is not owned and must outlive this object.
  ProcessGroups(const Mesh& mesh, MpiCommunicator& world);

  const Mesh& mesh() const { return mesh_; }
  Communicator& world() const { return world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& node() const { return *node_; }

  // The sum of the five communicators' figures, and their reset.
  CommStats total_stats() const;
  void reset_stats();

 private:
  Mesh mesh_;
  MpiCommunicator& world_;
  std::unique_ptr<MpiCommunicator> tp_, dp_, pp_, node_;
};

}  // namespace strata
