#include "parallel/mesh/process_groups.h"

#include "model/core/error.h"
#include "parallel/mesh/host_reduction.h"
#include "parallel/zero/sharded_parameters.h"

namespace strata {

ProcessGroups::ProcessGroups(const Mesh& mesh, MpiCommunicator& world)
    : mesh_(mesh), world_(world) {
  // Mesh groups are lists of world ranks, used below as ranks of `world`: the two must agree.
  STRATA_CHECK(world.size() == mesh.world_size() && world.rank() == mesh.world_rank(),
               "the mesh was built for another world");
  // The mesh's nodes (blocks of gpus_per_node of its ranks) must be real nodes: `world` is
  // MPI_COMM_WORLD, or a block of it (a DiLoCo worker) that fills whole nodes or sits in one.
  for (int r = 0; r < world.size(); ++r)
    STRATA_CHECK(
        world.world_rank_of(r) / mesh.gpus_per_node() - r / mesh.gpus_per_node() ==
            world.world_rank_of(0) / mesh.gpus_per_node(),
        "ProcessGroups needs a communicator whose nodes are blocks of gpus_per_node ranks");
  STRATA_CHECK(world.ranks_per_node() == mesh.gpus_per_node(),
               "the world communicator and the mesh disagree on gpus_per_node");
  // add() is collective over `world`: every rank creates the groups in this order.
  tp_ = &add("tp", mesh.tp_group());
  dp_ = &add("dp", mesh.dp_group());
  pp_ = &add("pp", mesh.pp_group());
  node_ = &add("node", mesh.node_group());
  dp_intra_node_ = &add("dp_intra_node", mesh.dp_intra_node_group());
  dp_inter_node_ = &add("dp_inter_node", mesh.dp_inter_node_group());
}

ReductionGroups ProcessGroups::reductions() const { return ReductionGroups{tp_, dp_, pp_}; }

ShardingGroups ProcessGroups::sharding() const {
  return ShardingGroups{dp_, NodeGroups{dp_intra_node_, dp_inter_node_}};
}

Communicator& ProcessGroups::add(const std::string& name, const std::vector<int>& members) {
  // Checked before the collective split, identically on every rank that passes the same name.
  if (name == "world") fail("process group name 'world' is taken");
  for (const Named& group : groups_)
    if (group.name == name) fail("process group '", name, "' exists already");
  groups_.push_back({name, world_.subgroup(members)});
  return *groups_.back().comm;
}

Communicator& ProcessGroups::group(const std::string& name) const {
  if (name == "world") return world_;
  for (const Named& group : groups_)
    if (group.name == name) return *group.comm;
  fail("no process group '", name, "'");
}

CommStats ProcessGroups::total_stats() const {
  CommStats total = world_.stats();
  for (const Named& group : groups_) total += group.comm->stats();
  return total;
}

void ProcessGroups::reset_stats() {
  world_.reset_stats();
  for (Named& group : groups_) group.comm->reset_stats();
}

}  // namespace strata
