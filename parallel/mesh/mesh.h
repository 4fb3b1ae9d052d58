// The process mesh of 4D parallelism (docs/ARCHITECTURE.md §2): every world rank is one cell of a
// tp × cp × dp × pp grid, and each parallel group is a slice of that grid.
//
// Rank order (contract): rank = (((pp_rank·DP + dp_rank)·CP + cp_rank)·TP + tp_rank). TP varies
// fastest, so a tensor-parallel group is TP consecutive world ranks; with TP dividing
// gpus_per_node it lies inside one node, where its per-layer traffic belongs. CP (context
// parallelism: each rank holds chunks of every sequence, model/context_attention.h) comes next,
// Megatron's order, so that its per-layer K/V traffic stays near; CP = 1 leaves every other order
// as it was. Then DP, PP slowest.
//
// Nodes are blocks of gpus_per_node consecutive world ranks (the last one may be partial), so a
// multi-node layout can be simulated on one machine by setting parallel.gpus_per_node.
//
// Every group is a class of ranks that share a key: members_sharing(key_of) lists the world ranks
// whose key equals this rank's, ascending, so the groups of one key function partition the world
// by construction (what MpiCommunicator::subgroup needs), and ascending world rank is each axis's
// own order (tp_rank, dp_rank, stage). A new kind of group inside the mesh is one key function
// (ProcessGroups::add). The mesh is one DiLoCo worker's: the worker axis, outermost, and the outer
// group that averages across workers are built beside the mesh groups by ProcessGroups
// (parallel/mesh/process_groups.h), which is where every communicator group is made.
#pragma once

#include <utility>
#include <vector>

namespace strata {

// A resolved layout: tp·cp·pp·dp is the world size. ep (expert parallelism) divides dp: the dp
// group is dp/ep expert-parallel groups of ep consecutive dp ranks.
struct MeshShape {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int ep = 1;
  int cp = 1;

  int world_size() const { return tp * cp * pp * dp; }
  bool operator==(const MeshShape&) const = default;
};

// The coordinates of one rank on the mesh.
struct MeshCoordinates {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  int cp = 0;

  bool operator==(const MeshCoordinates&) const = default;
};

// A layout as asked for (the parallel.* keys): dp == 0 means auto, world / (tp·cp·pp).
struct MeshRequest {
  int tp = 1;
  int pp = 1;
  int dp = 0;
  int gpus_per_node = 8;
  int ep = 1;
  int cp = 1;
};

// Resolves dp and checks the layout against the world; a layout that cannot run is a
// strata::Error naming the parallel.* key and the reason:
//   - tp, cp, pp >= 1, dp >= 0 (0 = auto), gpus_per_node >= 1, world_size >= 1;
//   - tp·cp·pp divides the world, and an explicit dp makes tp·cp·pp·dp equal to it;
//   - ep >= 1 divides dp;
//   - once the world spans several nodes (world > gpus_per_node), tp divides gpus_per_node, so
//     that no tensor-parallel group crosses a node boundary. A single partially used node accepts
//     any tp (a CPU run of tp = 3 on one machine is fine with the default gpus_per_node = 8).
// Checks against the model (n_head, vocabulary, layers, seq_len) need no world and are made when
// the config is validated (plan/config_validate.cpp).
MeshShape resolve_mesh_shape(const MeshRequest& request, int world_size);

class Mesh {
 public:
  // A layout checked by resolve_mesh_shape (dp == 0: auto); throws strata::Error if it does not
  // fit the world or world_rank is not in [0, world_size).
  Mesh(int world_size, int world_rank, int tp, int pp, int dp, int gpus_per_node);
  Mesh(const MeshShape& shape, int world_rank, int gpus_per_node);

  // The grid mapping, both ways, for any rank of a mesh of this shape.
  static int world_rank_of(const MeshShape& shape, int tp_rank, int dp_rank, int pp_rank,
                           int cp_rank = 0);
  static MeshCoordinates coordinates_of(const MeshShape& shape, int world_rank);
  int world_rank_of(int tp_rank, int dp_rank, int pp_rank, int cp_rank = 0) const {
    return world_rank_of(shape_, tp_rank, dp_rank, pp_rank, cp_rank);
  }

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size(); }
  int world_rank() const { return world_rank_; }
  int gpus_per_node() const { return gpus_per_node_; }

  int tp_size() const { return shape_.tp; }
  int dp_size() const { return shape_.dp; }
  int pp_size() const { return shape_.pp; }
  int cp_size() const { return shape_.cp; }
  int tp_rank() const { return coordinates_.tp; }
  int dp_rank() const { return coordinates_.dp; }
  int pp_rank() const { return coordinates_.pp; }
  int cp_rank() const { return coordinates_.cp; }
  const MeshCoordinates& coordinates() const { return coordinates_; }
  bool pp_is_first_stage() const { return coordinates_.pp == 0; }
  bool pp_is_last_stage() const { return coordinates_.pp == shape_.pp - 1; }
  int node_index() const { return node_of(world_rank_); }
  int node_of(int world_rank) const { return world_rank / gpus_per_node_; }

  // The world ranks whose key_of(world rank) equals this rank's, ascending (see the top of this
  // file). key_of returns any equality-comparable value (an int, a std::tuple of coordinates).
  template <class KeyOf>
  std::vector<int> members_sharing(KeyOf key_of) const {
    const auto mine = key_of(world_rank_);
    std::vector<int> members;
    for (int r = 0; r < world_size(); ++r)
      if (key_of(r) == mine) members.push_back(r);
    return members;
  }

  // The world ranks of this rank's groups, in group-rank order (a member's index is its rank in
  // the group's communicator):
  const std::vector<int>& tp_group() const { return tp_group_; }      // same cp, dp, pp; by tp_rank
  const std::vector<int>& dp_group() const { return dp_group_; }      // same tp, cp, pp; by dp_rank
  const std::vector<int>& pp_group() const { return pp_group_; }      // same tp, cp, dp; by stage
  const std::vector<int>& cp_group() const { return cp_group_; }      // same tp, dp, pp; by cp_rank
  const std::vector<int>& node_group() const { return node_group_; }  // this node, ascending
  // The ranks that hold replicas of the same weights (same tp, pp): the dp group with every cp
  // rank of each, by dp_rank·CP + cp_rank. Gradients are reduced, and ZeRO shards, over it, as
  // Megatron does; the dp group alone says which sequences a rank reads. With cp 1 it is the dp
  // group.
  const std::vector<int>& dp_cp_group() const { return dp_cp_group_; }
  // Expert parallelism splits the dp group in two directions (ep consecutive dp ranks hold the
  // experts between them; the ranks holding the same experts are one every ep):
  //   ep_group:         the dp ranks [⌊d/ep⌋·ep, ⌊d/ep⌋·ep + ep) of this rank's dp group (the
  //                     tokens' all-to-all; consecutive, so inside a node when ep·tp fits one);
  //   expert_dp_group:  the dp ranks d' with d' % ep == d % ep (their expert weights' reductions).
  // Group rank: ep rank d % ep, expert-dp rank ⌊d/ep⌋. Both are the dp group itself's parts; with
  // ep 1 the first is this rank alone and the second the dp group.
  const std::vector<int>& ep_group() const { return ep_group_; }
  const std::vector<int>& expert_dp_group() const { return expert_dp_group_; }
  int ep_size() const { return shape_.ep; }
  int ep_rank() const { return coordinates_.dp % shape_.ep; }

  // The two factors of the dp group across nodes, for hierarchical data parallelism (ZeRO++ hpZ
  // keeps a secondary weight copy inside the node; a hierarchical all-reduce sums in the node,
  // then across nodes). World ranks grow with dp_rank and a node is a block of consecutive world
  // ranks, so the members of a dp group in one node are consecutive dp ranks; a rank's *local
  // index* is its position among them (dp_local_index_of).
  //   dp_intra_node_group: the members of this rank's dp group in its node, by dp_rank;
  //   dp_inter_node_group: the members of this rank's dp group with its local index, one per node
  //                        that holds that many, by dp_rank (so by node).
  // When dp_factors_evenly(), every node holding ranks of a dp group holds the same number k of
  // them, for every dp group: intra groups have k members, inter groups dp/k, and
  // dp_rank = inter rank · k + intra rank. Otherwise (a partial last node, or nodes that hold
  // unequal shares of a dp group: 6 ranks, dp 6, 4 per node give {0,1,2,3} and {4,5}) both are
  // still well defined and partition the dp group, but their sizes differ from rank to rank and
  // their product is not the dp group (there, rank 2's inter-node group is {2} alone, rank 5's is
  // {1,5}). A scheme that needs the factorisation (ZeRO++ hpZ) checks dp_factors_evenly(), which
  // is a property of the layout and so the same on every rank.
  const std::vector<int>& dp_intra_node_group() const { return dp_intra_node_group_; }
  const std::vector<int>& dp_inter_node_group() const { return dp_inter_node_group_; }
  int dp_local_index_of(int world_rank) const;
  bool dp_factors_evenly() const;

 private:
  // The dp ranks [first, end) of world_rank's dp group that lie in world_rank's node.
  std::pair<int, int> dp_ranks_in_node_of(int world_rank) const;

  MeshShape shape_;
  int world_rank_ = 0;
  int gpus_per_node_ = 1;
  MeshCoordinates coordinates_;
  std::vector<int> tp_group_, dp_group_, pp_group_, cp_group_, dp_cp_group_, node_group_;
  std::vector<int> ep_group_, expert_dp_group_;
  std::vector<int> dp_intra_node_group_, dp_inter_node_group_;
};

// The layers of each pipeline stage as contiguous [begin, end) ranges in stage order. pp_layers
// empty: balanced, sizes differing by at most one with the extra layers on the earliest stages
// (the last stage also runs the LM head and loss, so it is the one to lighten). Otherwise
// pp_layers[s] layers for stage s. Throws strata::Error when the split is impossible.
std::vector<std::pair<int, int>> stage_layer_ranges(int n_layer, int pp,
                                                    const std::vector<int>& pp_layers = {});

}  // namespace strata
