#include "parallel/process_groups.h"

#include "model/core/error.h"

namespace strata {

ProcessGroups::ProcessGroups(const Mesh& mesh, MpiCommunicator& world)
    : mesh_(mesh), world_(world) {
  // Mesh groups are lists of world ranks, used below as ranks of `world`: the two must agree.
  STRATA_CHECK(world.size() == mesh.world_size() && world.rank() == mesh.world_rank(),
               "the mesh was built for another world");
  STRATA_CHECK(world.world_rank_of(world.rank()) == world.rank(),
               "ProcessGroups needs a communicator ordered like MPI_COMM_WORLD");
  STRATA_CHECK(world.ranks_per_node() == mesh.gpus_per_node(),
               "the world communicator and the mesh disagree on gpus_per_node");
  // subgroup() is collective over `world`: every rank creates the four groups in this order.
  tp_ = world.subgroup(mesh.tp_group());
  dp_ = world.subgroup(mesh.dp_group());
  pp_ = world.subgroup(mesh.pp_group());
  node_ = world.subgroup(mesh.node_group());
}

CommStats ProcessGroups::total_stats() const {
  CommStats total = world_.stats();
  for (const Communicator* group : {tp_.get(), dp_.get(), pp_.get(), node_.get()})
    total += group->stats();
  return total;
}

void ProcessGroups::reset_stats() {
  world_.reset_stats();
  for (Communicator* group : {tp_.get(), dp_.get(), pp_.get(), node_.get()}) group->reset_stats();
}

}  // namespace strata
