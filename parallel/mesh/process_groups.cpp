#include "parallel/mesh/process_groups.h"

#include "model/core/error.h"
#include "parallel/mesh/host_reduction.h"
#include "parallel/mesh/sharding_groups.h"

namespace strata {

namespace {

// The number of workers: DiLoCo's, or the one a job without DiLoCo is.
int worker_count(int diloco_workers) {
  STRATA_CHECK(diloco_workers >= 0, "ProcessGroups: ", diloco_workers, " DiLoCo workers");
  return diloco_workers == 0 ? 1 : diloco_workers;
}

// This rank's mesh rank: its place inside its worker's block of job / workers ranks.
int mesh_rank_in(const MpiCommunicator& job, int workers) {
  STRATA_CHECK(job.size() % workers == 0, "ProcessGroups: ", workers,
               " workers do not divide a job of ", job.size(), " ranks");
  return job.rank() % (job.size() / workers);
}

// The group whose accessor was called, which only DiLoCo has.
Communicator& diloco_group(const std::unique_ptr<MpiCommunicator>& group, const char* name) {
  STRATA_CHECK(group != nullptr, "process group '", name, "' exists under DiLoCo only");
  return *group;
}

}  // namespace

ProcessGroups::ProcessGroups(MpiCommunicator& job, int diloco_workers, const MeshShape& shape,
                             int gpus_per_node)
    : ProcessGroups(Mesh(shape, mesh_rank_in(job, worker_count(diloco_workers)), gpus_per_node),
                    job, diloco_workers) {}

ProcessGroups::ProcessGroups(const Mesh& mesh, MpiCommunicator& job, int diloco_workers)
    : mesh_(mesh), job_(job), workers_(worker_count(diloco_workers)) {
  // Every check is made before the first split, and alike on every rank (it looks at every
  // worker, not only this one), so a bad grid fails everywhere instead of leaving ranks waiting.
  const int workers = workers_, size = mesh.world_size(), node = mesh.gpus_per_node();
  STRATA_CHECK(job.size() == workers * size && job.rank() % size == mesh.world_rank(),
               "the mesh was built for another world");
  // The mesh's nodes (blocks of gpus_per_node of its ranks) must be real nodes: the job is
  // MPI_COMM_WORLD, or a block of it, and every worker fills whole nodes or sits in one.
  for (int w = 0; w < workers; ++w)
    for (int r = 0; r < size; ++r)
      STRATA_CHECK(
          job.world_rank_of(w * size + r) / node - r / node == job.world_rank_of(w * size) / node,
          "ProcessGroups needs a communicator whose nodes are blocks of gpus_per_node ranks");
  STRATA_CHECK(job.ranks_per_node() == node,
               "the world communicator and the mesh disagree on gpus_per_node");
  worker_index_ = job.rank() / size;
  std::vector<int> block, counterparts;  // job ranks: this worker's, this mesh rank's in each
  for (int r = 0; r < size; ++r) block.push_back(worker_index_ * size + r);
  for (int w = 0; w < workers; ++w) counterparts.push_back(w * size + mesh.world_rank());

  // The worker axis (DiLoCo only), split from the job in this order on every rank; the links
  // between workers are inter-worker, set before the splits that inherit it.
  if (diloco_workers > 0) {
    job.set_ranks_per_worker(size);
    worker_ = job.subgroup(block);
    worker_metrics_ = job.subgroup(block);
    outer_ = job.subgroup(counterparts);
    outer_metrics_ = job.subgroup(counterparts);
  }
  world_ = worker_ ? worker_.get() : &job;

  // The mesh axes, split from world: add() is collective over it, in this order on every rank.
  tp_ = &add("tp", mesh.tp_group());
  dp_ = &add("dp", mesh.dp_group());
  pp_ = &add("pp", mesh.pp_group());
  node_ = &add("node", mesh.node_group());
  dp_intra_node_ = &add("dp_intra_node", mesh.dp_intra_node_group());
  dp_inter_node_ = &add("dp_inter_node", mesh.dp_inter_node_group());
  // Expert parallelism's two parts of dp, only when it splits dp (every rank alike).
  if (mesh.ep_size() > 1) {
    ep_ = &add("ep", mesh.ep_group());
    expert_dp_ = &add("expert_dp", mesh.expert_dp_group());
  }
  // Context parallelism's group and the replicas' group over dp and cp, only with cp > 1 (every
  // rank alike); with cp 1 the replicas' group is dp.
  dp_cp_ = dp_;
  if (mesh.cp_size() > 1) {
    cp_ = &add("cp", mesh.cp_group());
    dp_cp_ = &add("dp_cp", mesh.dp_cp_group());
  }
}

Communicator& ProcessGroups::outer() const { return diloco_group(outer_, "outer"); }

Communicator& ProcessGroups::worker_metrics() const {
  return diloco_group(worker_metrics_, "worker_metrics");
}

Communicator& ProcessGroups::outer_metrics() const {
  return diloco_group(outer_metrics_, "outer_metrics");
}

ReductionGroups ProcessGroups::reductions() const {
  return ReductionGroups{tp_, dp_cp_, pp_, ep_, expert_dp_ != nullptr ? expert_dp_ : dp_cp_};
}

ShardingGroups ProcessGroups::sharding() const {
  return ShardingGroups{expert_dp_ != nullptr ? expert_dp_ : dp_cp_,
                        NodeGroups{dp_intra_node_, dp_inter_node_}, ep_};
}

Communicator& ProcessGroups::add(const std::string& name, const std::vector<int>& members) {
  // Checked before the collective split, identically on every rank that passes the same name.
  if (name == "world") fail("process group name 'world' is taken");
  for (const Named& group : groups_)
    if (group.name == name) fail("process group '", name, "' exists already");
  groups_.push_back({name, world_->subgroup(members)});
  return *groups_.back().comm;
}

Communicator& ProcessGroups::group(const std::string& name) const {
  if (name == "world") return *world_;
  for (const Named& group : groups_)
    if (group.name == name) return *group.comm;
  fail("no process group '", name, "'");
}

CommStats ProcessGroups::total_stats() const {
  CommStats total = world_->stats();
  for (const Named& group : groups_) total += group.comm->stats();
  if (outer_) total += outer_->stats();
  return total;
}

void ProcessGroups::reset_stats() {
  world_->reset_stats();
  for (Named& group : groups_) group.comm->reset_stats();
  if (outer_) outer_->reset_stats();
}

}  // namespace strata
