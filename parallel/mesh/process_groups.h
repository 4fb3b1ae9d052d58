// The communicators of one rank's parallel groups (docs/ARCHITECTURE.md §2): the one place where
// groups are built. The job is a grid of ranks, every group a slice of it by axis:
//
//   job rank  = worker · (job size / workers) + mesh rank
//   mesh rank = ((pp_rank · dp + dp_rank) · cp + cp_rank) · tp + tp_rank
//
// The DiLoCo worker axis is outermost (a run without DiLoCo is one worker), so a worker is a
// contiguous block of ranks; inside it the Mesh (parallel/mesh/mesh.h) places tp, dp and pp.
//   worker axis:  world (this rank's worker: the ranks its Mesh indexes) and, under DiLoCo, outer
//                 (this rank's counterpart, same mesh rank, in every worker, group rank = worker
//                 index), split from the job. Without DiLoCo world is the job itself and there is
//                 no outer group. Under DiLoCo, even of one worker, world is a communicator of its
//                 own, so the job-wide traffic of the trainer (checkpoint writing, the stop vote)
//                 stays out of a worker's figures, as DiLoCo's metrics have always counted them;
//   mesh axes:    tp (same dp and pp), dp (same tp and pp), pp (same tp and dp, by stage), node
//                 (the ranks of this rank's node), and the two node-wise factors of dp that
//                 hierarchical schemes (ZeRO++ hpZ, a two-level all-reduce) use: dp_intra_node
//                 and dp_inter_node (mesh.h says what they are, and when they factor dp), and
//                 with expert parallelism (ep > 1) ep and expert_dp, with context parallelism
//                 (cp > 1) cp and dp_cp, the replicas of the same weights (mesh.h); split
//                 from world, group rank i being the i-th rank of the matching Mesh group, so
//                 tp().rank() == mesh.tp_rank() and so on.
// Further groups are added by name from any partition of world (add(): every rank passes its own
// group's members, typically a Mesh::members_sharing list), so a new scheme's group is one call
// where the scheme is set up.
//
// Communication figures: each group communicator keeps its own CommStats, so traffic can be read
// per group (tp().stats() is the tensor-parallel traffic); total_stats() sums world, the mesh
// groups, the added ones and outer, for the per-step `comm_bytes` of metrics.jsonl, and
// reset_stats() clears them. The job's own traffic is in it only when the job is world (no
// DiLoCo). Under DiLoCo two duplicates, worker_metrics() and outer_metrics(), carry the sums that
// only metrics and bookkeeping need (a worker's loss, a consensus distance, every worker's
// counters for a checkpoint): no figure includes them, so the bytes reported are the training's
// alone. Link
// classes are those of MPI_COMM_WORLD ranks in every group (nodes of gpus_per_node ranks, and
// with several workers, blocks of one worker's ranks joined by inter-worker links), so the sums
// by link class are meaningful.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/mesh.h"

namespace strata {

struct ReductionGroups;  // parallel/mesh/host_reduction.h
struct ShardingGroups;   // parallel/mesh/sharding_groups.h

class ProcessGroups {
 public:
  // The grid of `job` (MPI_COMM_WORLD, or a block of it whose nodes are whole or shared, with
  // ranks_per_node == gpus_per_node): `diloco_workers` DiLoCo workers (0 without DiLoCo: the job
  // is one worker and has no worker-axis communicators), each a mesh of `shape`. Collective over
  // `job`: every rank builds its ProcessGroups at the same point, and the communicators are split
  // in the same order on every rank. Under DiLoCo it sets the job's ranks_per_worker (the
  // inter-worker link class, which every group inherits). `job` is not owned and must outlive
  // this object.
  ProcessGroups(MpiCommunicator& job, int diloco_workers, const MeshShape& shape,
                int gpus_per_node);
  // The same from this rank's Mesh inside its worker (mesh.world_rank() is this rank's mesh rank).
  ProcessGroups(const Mesh& mesh, MpiCommunicator& job, int diloco_workers = 0);

  const Mesh& mesh() const { return mesh_; }
  MpiCommunicator& job() const { return job_; }
  Communicator& world() const { return *world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& node() const { return *node_; }
  Communicator& dp_intra_node() const { return *dp_intra_node_; }
  Communicator& dp_inter_node() const { return *dp_inter_node_; }
  // Expert parallelism's groups: null when the mesh has ep 1 (the tokens stay, and the expert
  // weights are reduced over dp like every other).
  Communicator* ep() const { return ep_; }
  Communicator* expert_dp() const { return expert_dp_; }
  // Context parallelism's group (null with cp 1: every rank holds whole sequences), and the
  // replicas' group over dp and cp, which a reduction plan's dp axis and ZeRO run over (the dp
  // group itself when cp is 1).
  Communicator* cp() const { return cp_; }
  Communicator& dp_cp() const { return *dp_cp_; }

  // The worker axis: the number of workers (1 without DiLoCo) and this rank's worker index.
  int workers() const { return workers_; }
  int worker_index() const { return worker_index_; }
  // Under DiLoCo only (an error otherwise): outer, one rank per worker, and the metric
  // duplicates of world and outer.
  Communicator& outer() const;
  Communicator& worker_metrics() const;
  Communicator& outer_metrics() const;

  // The slices that other modules take, so that none assembles groups by hand: a reduction
  // plan's axes (tp, dp, pp; its dp axis is dp_cp) and ZeRO's (dp_cp, with dp's node-wise
  // factors: ZeRO++'s hierarchical schemes take cp 1).
  ReductionGroups reductions() const;
  ShardingGroups sharding() const;

  // A new group `name` whose members (ranks of world(), in the order that becomes their group
  // rank) are this rank's group of a partition of world(). Collective over world(): every rank
  // adds its groups at the same point and in the same order, each passing its own group's
  // members. Names are unique ("world" and the mesh groups above are taken).
  Communicator& add(const std::string& name, const std::vector<int>& members);
  // The group called `name` (world, the mesh groups and the added ones; the worker axis's have
  // their accessors only); an error if there is none.
  Communicator& group(const std::string& name) const;

  // The sum of every counted group's figures, and their reset.
  CommStats total_stats() const;
  void reset_stats();

 private:
  struct Named {
    std::string name;
    std::unique_ptr<MpiCommunicator> comm;
  };

  Mesh mesh_;
  MpiCommunicator& job_;
  int workers_ = 1;
  int worker_index_ = 0;
  // Under DiLoCo: this worker's block and the worker axis's other groups; all null otherwise.
  std::unique_ptr<MpiCommunicator> worker_, worker_metrics_, outer_, outer_metrics_;
  MpiCommunicator* world_ = nullptr;  // worker_, or the job
  std::vector<Named> groups_;         // in creation order, the same on every rank
  // The mesh groups, owned by groups_.
  Communicator *tp_ = nullptr, *dp_ = nullptr, *pp_ = nullptr, *node_ = nullptr;
  Communicator *dp_intra_node_ = nullptr, *dp_inter_node_ = nullptr;
  Communicator *ep_ = nullptr, *expert_dp_ = nullptr;
  Communicator *cp_ = nullptr, *dp_cp_ = nullptr;
};

}  // namespace strata
