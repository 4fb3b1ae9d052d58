// The process mesh (docs/ARCHITECTURE.md §2): the rank order TP fastest, then CP, DP, PP; groups
// that partition the world with TP groups inside a node; the node-wise factors of the dp group,
// even and uneven; every layout that cannot run rejected before any work with its reason; and the
// split of layers into pipeline stages.
#include "parallel/mesh/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "plan/config.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using Group = std::vector<int>;
using testing::error_of;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(Mesh, CoordinatesAndGroupsOfTwoByTwoByTwo) {
  // rank = ((pp·DP + dp)·TP + tp) with TP = DP = PP = 2: rank bits are (pp, dp, tp).
  for (int rank = 0; rank < 8; ++rank) {
    const Mesh mesh(8, rank, 2, 2, 0, 4);
    EXPECT_EQ(mesh.shape(), (MeshShape{2, 2, 2}));
    EXPECT_EQ(mesh.tp_rank(), rank & 1) << rank;
    EXPECT_EQ(mesh.dp_rank(), (rank >> 1) & 1) << rank;
    EXPECT_EQ(mesh.pp_rank(), rank >> 2) << rank;
    EXPECT_EQ(mesh.node_index(), rank / 4);
  }
  const Mesh five(8, 5, 2, 2, 0, 4);  // tp 1, dp 0, pp 1
  EXPECT_EQ(five.coordinates(), (MeshCoordinates{1, 0, 1}));
  EXPECT_EQ(five.tp_group(), (Group{4, 5}));
  EXPECT_EQ(five.dp_group(), (Group{5, 7}));
  EXPECT_EQ(five.pp_group(), (Group{1, 5}));
  EXPECT_EQ(five.node_group(), (Group{4, 5, 6, 7}));
  EXPECT_FALSE(five.pp_is_first_stage());
  EXPECT_TRUE(five.pp_is_last_stage());

  const Mesh two(8, 2, 2, 2, 0, 2);  // tp 0, dp 1, pp 0
  EXPECT_EQ(two.tp_group(), (Group{2, 3}));
  EXPECT_EQ(two.dp_group(), (Group{0, 2}));
  EXPECT_EQ(two.pp_group(), (Group{2, 6}));
  EXPECT_EQ(two.node_group(), (Group{2, 3}));
  EXPECT_TRUE(two.pp_is_first_stage());
  EXPECT_EQ(Mesh::world_rank_of(MeshShape{2, 2, 2}, 1, 1, 1), 7);
  EXPECT_EQ(two.world_rank_of(1, 0, 1), 5);
}

TEST(Mesh, ContextParallelismSitsBetweenTensorAndDataParallelism) {
  // rank = (((pp·DP + dp)·CP + cp)·TP + tp) with TP = CP = DP = 2, PP = 1: bits (dp, cp, tp).
  const MeshShape shape{2, 1, 2, 1, 2};
  for (int rank = 0; rank < 8; ++rank) {
    const Mesh mesh(shape, rank, 4);
    EXPECT_EQ(mesh.coordinates(), (MeshCoordinates{rank & 1, rank >> 2, 0, (rank >> 1) & 1}));
    EXPECT_EQ(mesh.world_rank_of(mesh.tp_rank(), mesh.dp_rank(), mesh.pp_rank(), mesh.cp_rank()),
              rank);
  }
  const Mesh five(shape, 5, 4);  // tp 1, cp 0, dp 1
  EXPECT_EQ(five.cp_size(), 2);
  EXPECT_EQ(five.tp_group(), (Group{4, 5}));
  EXPECT_EQ(five.cp_group(), (Group{5, 7}));
  EXPECT_EQ(five.dp_group(), (Group{1, 5}));
  EXPECT_EQ(five.dp_cp_group(), (Group{1, 3, 5, 7}));  // by dp·CP + cp
  EXPECT_EQ(five.pp_group(), (Group{5}));
  // dp's node-wise factors step over the cp ranks: nodes {0..3} and {4..7} each hold one of dp
  // group {1, 5}.
  EXPECT_EQ(five.dp_intra_node_group(), (Group{5}));
  EXPECT_EQ(five.dp_inter_node_group(), (Group{1, 5}));
  EXPECT_TRUE(five.dp_factors_evenly());
  // With cp 1 the replicas' group is the dp group.
  const Mesh plain(MeshShape{2, 1, 4}, 5, 4);
  EXPECT_EQ(plain.dp_cp_group(), plain.dp_group());
  EXPECT_EQ(plain.cp_group(), (Group{5}));

  EXPECT_CONTAINS(error_of([] {
                    resolve_mesh_shape(MeshRequest{2, 1, 0, 8, 1, 0}, 8);
                  }),
                  "'parallel.cp' must be >= 1");
  EXPECT_CONTAINS(error_of([] {
                    resolve_mesh_shape(MeshRequest{2, 1, 0, 8, 1, 2}, 6);
                  }),
                  "not divisible by parallel.tp*parallel.cp*parallel.pp (2*2*1=4)");
  EXPECT_CONTAINS(error_of([] {
                    resolve_mesh_shape(MeshRequest{2, 1, 3, 8, 1, 2}, 8);
                  }),
                  "'parallel.dp' (3) * tp*cp*pp (2*2*1=4) must equal the world size 8");
  EXPECT_EQ(resolve_mesh_shape(MeshRequest{2, 1, 0, 8, 1, 2}, 8), (MeshShape{2, 1, 2, 1, 2}));
}

TEST(Mesh, ExpertParallelGroupsSplitTheDataParallelGroupBothWays) {
  // tp 2, dp 4, ep 2 on 8 ranks: dp group of tp rank 1 is {1, 3, 5, 7}; ep groups are consecutive
  // dp ranks {1, 3} and {5, 7}, the ranks holding the same experts every second one: {1, 5}, {3,
  // 7}.
  const MeshShape shape{2, 1, 4, 2};
  for (int rank = 0; rank < 8; ++rank) {
    const Mesh mesh(shape, rank, 8);
    EXPECT_EQ(mesh.ep_rank(), mesh.dp_rank() % 2) << rank;
  }
  const Mesh five(shape, 5, 8);
  EXPECT_EQ(five.dp_group(), (Group{1, 3, 5, 7}));
  EXPECT_EQ(five.ep_group(), (Group{5, 7}));
  EXPECT_EQ(five.expert_dp_group(), (Group{1, 5}));
  EXPECT_EQ(five.ep_rank(), 0);
  // ep = dp: one ep group, every rank its own experts; ep 1: the dp group holds them all.
  EXPECT_EQ(Mesh(MeshShape{1, 1, 4, 4}, 2, 8).ep_group(), (Group{0, 1, 2, 3}));
  EXPECT_EQ(Mesh(MeshShape{1, 1, 4, 4}, 2, 8).expert_dp_group(), (Group{2}));
  EXPECT_EQ(Mesh(MeshShape{1, 1, 4, 1}, 2, 8).expert_dp_group(), (Group{0, 1, 2, 3}));
  EXPECT_CONTAINS(error_of([] {
                    resolve_mesh_shape(MeshRequest{1, 1, 4, 8, 3}, 4);
                  }),
                  "'parallel.ep' (3) must divide the data-parallel degree (dp 4)");
  EXPECT_CONTAINS(error_of([] {
                    resolve_mesh_shape(MeshRequest{1, 1, 0, 8, 0}, 4);
                  }),
                  "'parallel.ep' must be >= 1, got 0");
}

TEST(Mesh, MembersSharingAKeyFormAGroupInWorldRankOrder) {
  const Mesh mesh(8, 5, 1, 1, 0, 8);
  EXPECT_EQ(mesh.members_sharing([](int r) { return r % 2; }), (Group{1, 3, 5, 7}));
  EXPECT_EQ(mesh.members_sharing([](int r) { return r / 4; }), (Group{4, 5, 6, 7}));
  EXPECT_EQ(mesh.members_sharing([](int) { return 0; }), (Group{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh.members_sharing([](int r) { return r; }), (Group{5}));
}

// The data-parallel groups of one node and across nodes, written out by hand.
TEST(Mesh, DataParallelNodeGroupsByHand) {
  struct Case {
    int world, tp, pp, gpus_per_node, rank;
    Group dp, intra, inter;
    bool even;
  };
  for (const Case& c : std::vector<Case>{
           // One dp group of 8 over two nodes of 4: local index 1 of node 1 meets node 0's.
           {8, 1, 1, 4, 5, {0, 1, 2, 3, 4, 5, 6, 7}, {4, 5, 6, 7}, {1, 5}, true},
           {8, 1, 1, 4, 0, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}, {0, 4}, true},
           // tp 2: a dp group is every other rank, two of them per node.
           {8, 2, 1, 4, 5, {1, 3, 5, 7}, {5, 7}, {1, 5}, true},
           {8, 2, 1, 4, 2, {0, 2, 4, 6}, {0, 2}, {2, 6}, true},
           // pp 2: each stage's dp group, within its stage's nodes.
           {8, 1, 2, 2, 6, {4, 5, 6, 7}, {6, 7}, {4, 6}, true},
           {8, 2, 2, 2, 5, {5, 7}, {5}, {5, 7}, true},  // one dp rank per node
           {8, 2, 2, 4, 5, {5, 7}, {5, 7}, {5}, true},  // the whole dp group in one node
           {1, 1, 1, 8, 0, {0}, {0}, {0}, true},
           // Uneven: nodes {0,1,2,3} and {4,5} hold 4 and 2 ranks of the dp group.
           {6, 1, 1, 4, 2, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3}, {2}, false},
           {6, 1, 1, 4, 5, {0, 1, 2, 3, 4, 5}, {4, 5}, {1, 5}, false},
           // Uneven across stages: node 1 holds ranks 4,5 of stage 0 and 6,7 of stage 1.
           {12, 1, 2, 4, 6, {6, 7, 8, 9, 10, 11}, {6, 7}, {6, 8}, false},
           {12, 1, 2, 4, 9, {6, 7, 8, 9, 10, 11}, {8, 9, 10, 11}, {7, 9}, false},
       }) {
    SCOPED_TRACE("world " + std::to_string(c.world) + " tp " + std::to_string(c.tp) + " pp " +
                 std::to_string(c.pp) + " gpus_per_node " + std::to_string(c.gpus_per_node) +
                 " rank " + std::to_string(c.rank));
    const Mesh mesh(c.world, c.rank, c.tp, c.pp, 0, c.gpus_per_node);
    EXPECT_EQ(mesh.dp_group(), c.dp);
    EXPECT_EQ(mesh.dp_intra_node_group(), c.intra);
    EXPECT_EQ(mesh.dp_inter_node_group(), c.inter);
    EXPECT_EQ(mesh.dp_factors_evenly(), c.even);
  }
}

struct Layout {
  int world, tp, pp, dp, gpus_per_node;
};

// The node-wise dp groups of `rank` from their definition, by counting: the dp group's members in
// the rank's node, and those whose position among their own node's members is the rank's.
std::pair<Group, Group> dp_node_groups_by_definition(const Layout& layout, int rank) {
  const Mesh mesh(layout.world, rank, layout.tp, layout.pp, layout.dp, layout.gpus_per_node);
  const auto node_of = [&](int r) { return r / layout.gpus_per_node; };
  const auto position_in_node = [&](int r) {
    return std::count_if(mesh.dp_group().begin(), mesh.dp_group().end(),
                         [&](int m) { return node_of(m) == node_of(r) && m < r; });
  };
  Group intra, inter;
  for (int m : mesh.dp_group()) {
    if (node_of(m) == node_of(rank)) intra.push_back(m);
    if (position_in_node(m) == position_in_node(rank)) inter.push_back(m);
  }
  return {intra, inter};
}

// For every rank of a layout: coordinates round-trip, each group holds exactly the ranks that
// share the other coordinates, ordered by its own coordinate, and each kind of group partitions
// the world.
void check_layout(const Layout& layout) {
  SCOPED_TRACE("world " + std::to_string(layout.world) + " tp " + std::to_string(layout.tp) +
               " pp " + std::to_string(layout.pp) + " dp " + std::to_string(layout.dp) +
               " gpus_per_node " + std::to_string(layout.gpus_per_node));
  std::set<Group> tp_groups, dp_groups, pp_groups, node_groups, intra_groups, inter_groups;
  std::set<std::size_t> intra_sizes;
  for (int rank = 0; rank < layout.world; ++rank) {
    const Mesh mesh(layout.world, rank, layout.tp, layout.pp, layout.dp, layout.gpus_per_node);
    ASSERT_EQ(mesh.world_size(), layout.world);
    EXPECT_EQ(mesh.tp_size() * mesh.dp_size() * mesh.pp_size(), layout.world);
    EXPECT_EQ(mesh.world_rank_of(mesh.tp_rank(), mesh.dp_rank(), mesh.pp_rank()), rank);
    EXPECT_EQ(Mesh::coordinates_of(mesh.shape(), rank), mesh.coordinates());

    ASSERT_EQ(static_cast<int>(mesh.tp_group().size()), mesh.tp_size());
    ASSERT_EQ(static_cast<int>(mesh.dp_group().size()), mesh.dp_size());
    ASSERT_EQ(static_cast<int>(mesh.pp_group().size()), mesh.pp_size());
    for (int i = 0; i < mesh.tp_size(); ++i) {
      // TP groups are tp consecutive ranks, aligned on multiples of tp.
      EXPECT_EQ(mesh.tp_group()[i], rank - mesh.tp_rank() + i);
      EXPECT_EQ(mesh.tp_group()[i] / layout.gpus_per_node, mesh.node_index()) << "TP leaves node";
    }
    for (int i = 0; i < mesh.dp_size(); ++i)
      EXPECT_EQ(Mesh::coordinates_of(mesh.shape(), mesh.dp_group()[i]),
                (MeshCoordinates{mesh.tp_rank(), i, mesh.pp_rank()}));
    for (int i = 0; i < mesh.pp_size(); ++i)
      EXPECT_EQ(Mesh::coordinates_of(mesh.shape(), mesh.pp_group()[i]),
                (MeshCoordinates{mesh.tp_rank(), mesh.dp_rank(), i}));
    EXPECT_EQ(mesh.tp_group()[mesh.tp_rank()], rank);
    EXPECT_EQ(mesh.dp_group()[mesh.dp_rank()], rank);
    EXPECT_EQ(mesh.pp_group()[mesh.pp_rank()], rank);
    const Group& node = mesh.node_group();
    EXPECT_NE(std::find(node.begin(), node.end(), rank), node.end());
    for (int member : node) EXPECT_EQ(member / layout.gpus_per_node, mesh.node_index());

    const auto [intra, inter] = dp_node_groups_by_definition(layout, rank);
    EXPECT_EQ(mesh.dp_intra_node_group(), intra);
    EXPECT_EQ(mesh.dp_inter_node_group(), inter);
    intra_sizes.insert(intra.size());

    tp_groups.insert(mesh.tp_group());
    dp_groups.insert(mesh.dp_group());
    pp_groups.insert(mesh.pp_group());
    node_groups.insert(node);
    intra_groups.insert(intra);
    inter_groups.insert(inter);
  }
  // Even: every intra-node group has k members, and dp rank = inter rank · k + intra rank.
  const bool even = intra_sizes.size() == 1;
  for (int rank = 0; rank < layout.world; ++rank) {
    const Mesh mesh(layout.world, rank, layout.tp, layout.pp, layout.dp, layout.gpus_per_node);
    EXPECT_EQ(mesh.dp_factors_evenly(), even);
    if (!even) continue;
    const Group& intra = mesh.dp_intra_node_group();
    const Group& inter = mesh.dp_inter_node_group();
    const auto index_in = [rank](const Group& g) {
      return static_cast<int>(std::find(g.begin(), g.end(), rank) - g.begin());
    };
    EXPECT_EQ(intra.size() * inter.size(), mesh.dp_group().size());
    EXPECT_EQ(mesh.dp_rank(), index_in(inter) * static_cast<int>(intra.size()) + index_in(intra));
  }
  for (const auto* groups :
       {&tp_groups, &dp_groups, &pp_groups, &node_groups, &intra_groups, &inter_groups}) {
    std::vector<int> seen;
    for (const Group& group : *groups) seen.insert(seen.end(), group.begin(), group.end());
    std::sort(seen.begin(), seen.end());
    std::vector<int> world(static_cast<std::size_t>(layout.world));
    for (int r = 0; r < layout.world; ++r) world[static_cast<std::size_t>(r)] = r;
    EXPECT_EQ(seen, world) << "groups do not partition the world";
  }
}

TEST(Mesh, GroupsPartitionTheWorldForManyLayouts) {
  for (const Layout& layout : std::vector<Layout>{{1, 1, 1, 0, 8},
                                                  {8, 2, 2, 2, 4},
                                                  {8, 2, 2, 0, 2},
                                                  {8, 1, 1, 0, 8},
                                                  {8, 8, 1, 1, 8},
                                                  {8, 1, 8, 0, 1},
                                                  {12, 2, 3, 0, 4},
                                                  {16, 4, 2, 2, 8},
                                                  {24, 2, 3, 4, 6},
                                                  {6, 3, 1, 0, 8},
                                                  {10, 2, 1, 5, 4},
                                                  {6, 1, 1, 0, 4},
                                                  {12, 1, 2, 0, 4},
                                                  {8, 1, 1, 0, 3},
                                                  {16, 2, 1, 0, 4}})
    check_layout(layout);
}

TEST(Mesh, DataParallelAutoIsTheRestOfTheWorld) {
  EXPECT_EQ(resolve_mesh_shape(MeshRequest{2, 2, 0, 8}, 16), (MeshShape{2, 2, 4}));
  EXPECT_EQ(resolve_mesh_shape(MeshRequest{1, 1, 0, 8}, 3), (MeshShape{1, 1, 3}));
  EXPECT_EQ(resolve_mesh_shape(MeshRequest{2, 1, 4, 8}, 8), (MeshShape{2, 1, 4}));
  // A node only partly used (world < gpus_per_node) is one node whatever tp.
  const Mesh partial(10, 9, 2, 1, 0, 4);
  EXPECT_EQ(partial.node_group(), (Group{8, 9}));
}

TEST(Mesh, LayoutsThatDoNotFitTheWorldAreRejectedWithTheirReason) {
  auto mesh_error = [](int world, int rank, int tp, int pp, int dp, int gpus_per_node) {
    return error_of([&] { Mesh(world, rank, tp, pp, dp, gpus_per_node); });
  };
  EXPECT_EQ(mesh_error(6, 0, 2, 2, 0, 8),
            "world size 6 is not divisible by parallel.tp*parallel.pp (2*2=4)");
  EXPECT_CONTAINS(mesh_error(8, 0, 2, 2, 3, 8),
                  "'parallel.dp' (3) * tp*pp (2*2=4) must equal the world size 8; use dp: auto "
                  "or launch 12 ranks");
  // TP wider than a node, and TP not dividing the node so that a group straddles two nodes.
  EXPECT_CONTAINS(mesh_error(8, 0, 4, 1, 0, 2),
                  "'parallel.tp' (4) must divide parallel.gpus_per_node (2) when the world (8 "
                  "ranks) spans several nodes");
  EXPECT_CONTAINS(mesh_error(8, 0, 4, 1, 0, 6), "must stay inside one node");
  EXPECT_CONTAINS(mesh_error(12, 0, 3, 1, 0, 8), "'parallel.tp' (3) must divide");
  EXPECT_CONTAINS(mesh_error(8, 8, 2, 2, 0, 8), "world rank 8 is outside the world of 8 ranks");
  EXPECT_CONTAINS(mesh_error(8, -1, 2, 2, 0, 8), "world rank -1 is outside");
  EXPECT_EQ(mesh_error(0, 0, 1, 1, 0, 8), "world size must be >= 1, got 0");
  EXPECT_EQ(mesh_error(4, 0, 0, 1, 0, 8), "'parallel.tp' must be >= 1, got 0");
  EXPECT_EQ(mesh_error(4, 0, 1, 0, 0, 8), "'parallel.pp' must be >= 1, got 0");
  EXPECT_CONTAINS(mesh_error(4, 0, 1, 1, -2, 8), "'parallel.dp' must be 'auto' or a positive");
  EXPECT_EQ(mesh_error(4, 0, 1, 1, 0, 0), "'parallel.gpus_per_node' must be >= 1, got 0");
}

// A config's layout on a world goes through both stages a run goes through: load_config (the
// checks against the model) and resolve_mesh (the checks against the world).
std::string layout_error(const std::vector<std::string>& overrides, int world) {
  return error_of([&] {
    const Config config = parse_config("data: {train: t}\n", "c.yaml", overrides);
    resolve_mesh(config, world);
  });
}

TEST(Mesh, ConfigLayoutsThatCannotRunAreRejectedWithTheirReason) {
  // A model of 8 heads, 4 layers, 4096 tokens, seq_len 128 (the defaults but n_head).
  const std::string heads = "model.n_head=8";
  EXPECT_EQ(layout_error({heads, "parallel.tp=2", "parallel.pp=2"}, 8), "");
  EXPECT_EQ(resolve_mesh(parse_config("data: {train: t}\nmodel: {n_head: 8}\n"
                                      "parallel: {tp: 2, pp: 2}\ntrain: {global_batch: 16}\n",
                                      "c"),
                         8),
            (MeshShape{2, 2, 2}));

  // Against the model: heads, vocabulary rows, sequence (under sequence parallelism), layers.
  EXPECT_CONTAINS(layout_error({"parallel.tp=3"}, 3), "'parallel.tp' (3) must divide model.n_head");
  EXPECT_CONTAINS(layout_error({"model.n_head=12", "model.d_model=96", "parallel.tp=3"}, 3),
                  "'parallel.tp' (3) must divide the padded vocabulary (4096: model.vocab_size "
                  "4096 rounded up to a multiple of 128)");
  EXPECT_EQ(
      layout_error({"model.n_head=12", "model.d_model=96", "model.vocab_size=300", "parallel.tp=3"},
                   3),
      "");  // 300 pads to 384 = 3·128
  EXPECT_CONTAINS(
      layout_error({heads, "model.seq_len=100", "parallel.tp=8", "parallel.sequence_parallel=true"},
                   8),
      "'parallel.sequence_parallel' needs model.seq_len (100) divisible by "
      "parallel.tp (8)");
  EXPECT_CONTAINS(layout_error({"parallel.pp=5"}, 5),
                  "'parallel.pp' (5) must be <= model.n_layer (4)");
  EXPECT_CONTAINS(layout_error({"parallel.pp=2", "parallel.pp_layers=[3,2]"}, 2),
                  "'parallel.pp_layers' must sum to model.n_layer (4), got 5");

  // Against the world: divisibility, explicit dp, nodes, and the batch per data-parallel pass.
  EXPECT_EQ(layout_error({heads, "parallel.tp=2", "parallel.pp=2"}, 6),
            "world size 6 is not divisible by parallel.tp*parallel.pp (2*2=4)");
  EXPECT_CONTAINS(layout_error({heads, "parallel.tp=2", "parallel.dp=2"}, 8),
                  "'parallel.dp' (2) * tp*pp (2*1=2) must equal the world size 8");
  EXPECT_CONTAINS(layout_error({heads, "parallel.tp=4", "parallel.gpus_per_node=2"}, 8),
                  "'parallel.tp' (4) must divide parallel.gpus_per_node (2)");
  EXPECT_EQ(layout_error({"train.global_batch=64", "train.micro_batch=8"}, 3),
            "'train.global_batch' (64) must be divisible by micro_batch*dp (8*3=24)");
  // Interleaved walks groups of pp micro-batches: 64 / (8 · 1) = 8 per step is not a multiple of 3.
  const std::vector<std::string> interleaved = {"model.n_layer=6",
                                                "parallel.pp=3",
                                                "parallel.pipeline_schedule=interleaved",
                                                "parallel.virtual_stages=2",
                                                "train.global_batch=64",
                                                "train.micro_batch=8"};
  EXPECT_EQ(layout_error(interleaved, 3),
            "'parallel.pipeline_schedule' interleaved needs the micro-batches per step "
            "(train.global_batch / (micro_batch*dp) = 8) to be a multiple of parallel.pp (3): its "
            "order walks whole groups of pp micro-batches through each chunk");
  EXPECT_EQ(
      layout_error({"model.n_layer=4", "parallel.pp=2", "parallel.pipeline_schedule=interleaved",
                    "parallel.virtual_stages=2", "train.global_batch=64", "train.micro_batch=8"},
                   2),
      "");
  EXPECT_EQ(resolve_data_parallel(parse_config("data: {train: t}\n", "c"), 4), 4);
  // Expert parallelism takes ep of the data-parallel ranks: 6 ranks, dp 6, ep 4 does not split.
  EXPECT_CONTAINS(layout_error({"model.moe.experts=4", "parallel.ep=4", "train.global_batch=48",
                                "train.micro_batch=2"},
                               6),
                  "'parallel.ep' (4) must divide the data-parallel degree (dp 6)");
  EXPECT_CONTAINS(
      layout_error({"model.moe.experts=4", "parallel.ep=2", "parallel.zero.stage=2"}, 2),
      "'parallel.zero.stage' (2) shards over the data-parallel ranks that hold the "
      "same experts, but parallel.ep (2) equals dp (2)");
  EXPECT_EQ(layout_error({"model.moe.experts=4", "parallel.ep=2", "parallel.zero.stage=2"}, 4), "");
}

TEST(StageLayerRanges, BalancedGivesTheExtraLayersToTheEarliestStages) {
  using Ranges = std::vector<std::pair<int, int>>;
  EXPECT_EQ(stage_layer_ranges(8, 2), (Ranges{{0, 4}, {4, 8}}));
  EXPECT_EQ(stage_layer_ranges(10, 4), (Ranges{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  EXPECT_EQ(stage_layer_ranges(7, 3), (Ranges{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_EQ(stage_layer_ranges(5, 1), (Ranges{{0, 5}}));
  EXPECT_EQ(stage_layer_ranges(3, 3), (Ranges{{0, 1}, {1, 2}, {2, 3}}));
  for (int n_layer = 1; n_layer <= 12; ++n_layer)
    for (int pp = 1; pp <= n_layer; ++pp) {
      const Ranges ranges = stage_layer_ranges(n_layer, pp);
      ASSERT_EQ(static_cast<int>(ranges.size()), pp);
      EXPECT_EQ(ranges.front().first, 0);
      EXPECT_EQ(ranges.back().second, n_layer);
      for (int s = 0; s < pp; ++s) {
        const int size = ranges[s].second - ranges[s].first;
        EXPECT_GE(size, n_layer / pp);
        EXPECT_LE(size, n_layer / pp + 1);
        if (s > 0) {
          EXPECT_EQ(ranges[s].first, ranges[s - 1].second);
          EXPECT_LE(size, ranges[s - 1].second - ranges[s - 1].first);
        }
      }
    }
}

TEST(StageLayerRanges, ExplicitSizesAreContiguousInStageOrder) {
  using Ranges = std::vector<std::pair<int, int>>;
  EXPECT_EQ(stage_layer_ranges(6, 3, {1, 3, 2}), (Ranges{{0, 1}, {1, 4}, {4, 6}}));
  EXPECT_EQ(stage_layer_ranges(4, 2, {3, 1}), (Ranges{{0, 3}, {3, 4}}));
  EXPECT_CONTAINS(error_of([] {
                    stage_layer_ranges(6, 2, {1, 3, 2});
                  }),
                  "'parallel.pp_layers' must have one entry per pipeline stage");
  EXPECT_CONTAINS(error_of([] {
                    stage_layer_ranges(6, 2, {4, 3});
                  }),
                  "'parallel.pp_layers' must sum to model.n_layer (6), got 7");
  EXPECT_CONTAINS(error_of([] {
                    stage_layer_ranges(6, 2, {6, 0});
                  }),
                  "'parallel.pp_layers' entries must be >= 1, got 0 at index 1");
  EXPECT_CONTAINS(error_of([] { stage_layer_ranges(2, 3); }),
                  "'parallel.pp' (3) must be <= model.n_layer (2)");
}

}  // namespace
}  // namespace strata
