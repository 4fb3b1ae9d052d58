// The communicators of one rank's parallel groups (docs/ARCHITECTURE.md §2), built from the mesh:
// world, tp (same dp and pp), dp (same tp and pp), pp (same tp and dp, by stage), node (the ranks
// of this rank's node), and the two node-wise factors of dp that hierarchical schemes (ZeRO++ hpZ,
// a two-level all-reduce) use: dp_intra_node and dp_inter_node (parallel/mesh/mesh.h says what they
// are, and when they factor dp). Group rank i is the i-th world rank of the matching Mesh group, so
// tp().rank() == mesh.tp_rank() and so on.
//
// Further groups are added by name from any partition of the world (add(): every rank passes its
// own group's members, typically a Mesh::members_sharing list), so a new scheme's group, such as
// DiLoCo's workers, is one call where the scheme is set up.
//
// Communication figures: each group communicator keeps its own CommStats, so traffic can be read
// per group (tp().stats() is the tensor-parallel traffic); total_stats() sums every group, world
// and added ones included, for the per-step `comm_bytes` of metrics.jsonl, and reset_stats()
// clears them all. Link classes are those of world ranks in every group, so the sums by link class
// are meaningful.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/mesh.h"

namespace strata {

struct ReductionGroups;  // parallel/mesh/host_reduction.h
struct ShardingGroups;   // parallel/zero/sharded_parameters.h

class ProcessGroups {
 public:
  // Collective over `world` (MPI_COMM_WORLD, or one DiLoCo worker's contiguous block of it whose
  // nodes are whole or shared, with ranks_per_node == mesh.gpus_per_node()): every rank builds
  // its ProcessGroups at the same point. The mesh's ranks are ranks of `world`. `world` is not
  // owned and must outlive this object.
  ProcessGroups(const Mesh& mesh, MpiCommunicator& world);

  const Mesh& mesh() const { return mesh_; }
  Communicator& world() const { return world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& node() const { return *node_; }
  Communicator& dp_intra_node() const { return *dp_intra_node_; }
  Communicator& dp_inter_node() const { return *dp_inter_node_; }

  // The slices that other modules take, so that none assembles groups by hand: a reduction
  // plan's axes (tp, dp, pp) and ZeRO's (dp, with its node-wise factors).
  ReductionGroups reductions() const;
  ShardingGroups sharding() const;

  // A new group `name` whose members (world ranks, in the order that becomes their group rank)
  // are this rank's group of a partition of the world. Collective over world(): every rank adds
  // its groups at the same point and in the same order, each passing its own group's members.
  // Names are unique ("world" and the groups above are taken).
  Communicator& add(const std::string& name, const std::vector<int>& members);
  // The group called `name` (world and every group above included); an error if there is none.
  Communicator& group(const std::string& name) const;

  // The sum of every group's figures, and their reset.
  CommStats total_stats() const;
  void reset_stats();

 private:
  struct Named {
    std::string name;
    std::unique_ptr<MpiCommunicator> comm;
  };

  Mesh mesh_;
  MpiCommunicator& world_;
  std::vector<Named> groups_;  // in creation order, the same on every rank
  // The mesh groups, owned by groups_.
  Communicator *tp_ = nullptr, *dp_ = nullptr, *pp_ = nullptr, *node_ = nullptr;
  Communicator *dp_intra_node_ = nullptr, *dp_inter_node_ = nullptr;
};

}  // namespace strata
