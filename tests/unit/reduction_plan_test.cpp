// Reduction plans (parallel/mesh/reduction_plan.h) checked without MPI, under ZeRO stages 0 to 3:
// for every rank of a layout the plan is built as the trainer builds it and executed by a
// simulation of the whole mesh, whose sums add in an order that depends on the group and the
// element (as a ring all-reduce does), so rounding differs between groups. Checked: every gradient
// element is summed over the data-parallel group exactly once, the owners cover the buffer, the
// norm counts every logical element exactly once (per replica at stage 0, over the job when
// sharded), and the two pipeline ends' tied wte copies end bitwise equal.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "model/core/error.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/reduction_plan.h"
#include "plan/config.h"
#include "plan/placement.h"

namespace strata {
namespace {

const GptShape kShape{4, 4, 32, 16, 200};

struct Layout {
  int tp, dp, pp;
  bool sequence_parallel;
  int zero_stage = 0;
};

std::string describe(const Layout& l) {
  return "tp " + std::to_string(l.tp) + " dp " + std::to_string(l.dp) + " pp " +
         std::to_string(l.pp) + (l.sequence_parallel ? " sp" : "") + " zero " +
         std::to_string(l.zero_stage);
}

struct RankPlan {
  MeshCoordinates at;
  ModelPartition partition;
  ParameterLayout layout;
  ReductionPlan plan;
};

ModelPartition partition_at(const Layout& l, const MeshCoordinates& at) {
  const auto stages = stage_layer_ranges(kShape.n_layer, l.pp);
  ModelPartition p;
  p.tp_rank = at.tp;
  p.tp_size = l.tp;
  p.layer_begin = stages[at.pp].first;
  p.layer_end = stages[at.pp].second;
  p.has_embedding = at.pp == 0;
  p.has_head = at.pp == l.pp - 1;
  p.sequence_parallel = l.sequence_parallel;
  return p;
}

// Every rank's plan, built as the trainer builds it.
std::vector<RankPlan> plans_of(const Layout& l) {
  const MeshShape shape{l.tp, l.pp, l.dp};
  std::vector<RankPlan> ranks;
  for (int rank = 0; rank < shape.world_size(); ++rank) {
    const MeshCoordinates at = Mesh::coordinates_of(shape, rank);
    const ModelPartition p = partition_at(l, at);
    ParameterLayout layout = ParameterLayout::for_partition(kShape, p);
    ReductionPlacement placement{p, at.dp, l.dp, at.pp, l.pp, l.zero_stage};
    if (p.has_embedding != p.has_head) {
      MeshCoordinates peer = at;
      peer.pp = p.has_embedding ? l.pp - 1 : 0;
      placement.tied_peer_total =
          ParameterLayout::for_partition(kShape, partition_at(l, peer)).total();
    }
    ReductionPlan plan = make_reduction_plan(layout, placement);
    ranks.push_back({at, p, std::move(layout), std::move(plan)});
  }
  return ranks;
}

// The world ranks of `rank`'s group along `axis`, in group-rank order.
std::vector<int> group_of(const Layout& l, const MeshCoordinates& at, ParallelAxis axis) {
  const MeshShape shape{l.tp, l.pp, l.dp};
  std::vector<int> members;
  const int n = axis == ParallelAxis::tp ? l.tp : axis == ParallelAxis::dp ? l.dp : l.pp;
  for (int i = 0; i < n; ++i)
    members.push_back(Mesh::world_rank_of(shape, axis == ParallelAxis::tp ? i : at.tp,
                                          axis == ParallelAxis::dp ? i : at.dp,
                                          axis == ParallelAxis::pp ? i : at.pp));
  return members;
}

// Runs every rank's gradient operations in lockstep: operation k of every member of a group
// meets the same operation of the others.
void simulate(const Layout& l, const std::vector<RankPlan>& ranks,
              std::vector<std::vector<float>>& buffers) {
  using Kind = RangeReduction::Kind;
  // Stages 2 and 3: the backward passes first reduce-scatter each segment over dp to its owners.
  for (const RankPlan& r : ranks) {
    if (!r.plan.gradients_by_segment || r.at.dp != 0) continue;
    const std::vector<int> members = group_of(l, r.at, ParallelAxis::dp);
    for (const ParameterSegment& segment : r.layout.segments()) {
      const std::vector<std::size_t> counts = shard_counts(r.plan, segment.range, l.dp);
      std::size_t e = segment.range.begin;
      for (int owner = 0; owner < l.dp; ++owner)
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(owner)]; ++i, ++e) {
          float sum = 0;
          for (int k = 0; k < l.dp; ++k) sum += buffers[members[(owner + 1 + k) % l.dp]][e];
          buffers[members[owner]][e] = sum;
        }
      ASSERT_EQ(e, segment.range.end) << describe(l) << " " << segment.name;
    }
  }
  std::vector<std::size_t> next(ranks.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (next[r] >= ranks[r].plan.gradients.size()) continue;
      const RangeReduction& op = ranks[r].plan.gradients[next[r]];
      std::vector<int> members = group_of(l, ranks[r].at, op.axis);
      if (op.kind == Kind::tied_exchange) members = {members[0], members.back()};
      bool ready = true;  // every member is at the same operation
      for (int m : members) {
        const auto& ops = ranks[m].plan.gradients;
        ready = ready && next[m] < ops.size() && ops[next[m]].kind == op.kind &&
                ops[next[m]].axis == op.axis && ops[next[m]].range.size() == op.range.size();
      }
      ASSERT_TRUE(ready || op.kind != Kind::tied_exchange || members.size() == 2) << describe(l);
      if (!ready) continue;
      const std::size_t count = op.range.size();
      const int n = static_cast<int>(members.size());
      auto at = [&](int m) { return ranks[m].plan.gradients[next[m]].range.begin; };
      if (op.kind == Kind::all_gather) {  // member k's chunk k to every member
        const std::size_t chunk = count / n;
        std::vector<float> gathered(count);
        for (int k = 0; k < n; ++k)
          std::copy_n(buffers[members[k]].begin() + at(members[k]) + k * chunk, chunk,
                      gathered.begin() + k * chunk);
        for (int m : members)
          std::copy(gathered.begin(), gathered.end(), buffers[m].begin() + at(m));
        for (int m : members) ++next[m];
        progress = true;
        continue;
      }
      std::vector<float> result(count);
      for (std::size_t e = 0; e < count; ++e) {
        // A ring sums chunk c starting from member c + 1: the order depends on the element.
        const int first = static_cast<int>((e * n / count + 1 + op.range.begin) % n);
        float sum = 0;
        for (int k = 0; k < n; ++k) {
          const int m = members[(first + k) % n];
          sum += buffers[m][at(m) + e];
        }
        result[e] = sum;
      }
      if (op.kind == Kind::tied_exchange) {  // each end adds the other's values to its own
        const int a = members[0], b = members[1];
        for (std::size_t e = 0; e < count; ++e) {
          const float va = buffers[a][at(a) + e], vb = buffers[b][at(b) + e];
          buffers[a][at(a) + e] = va + vb;
          buffers[b][at(b) + e] = vb + va;
        }
      } else if (op.kind == Kind::reduce_scatter) {  // member k keeps the sum of its chunk
        const std::size_t chunk = count / n;
        for (int k = 0; k < n; ++k)
          std::copy_n(result.begin() + k * chunk, chunk,
                      buffers[members[k]].begin() + at(members[k]) + k * chunk);
      } else {
        for (int m : members) std::copy(result.begin(), result.end(), buffers[m].begin() + at(m));
      }
      for (int m : members) ++next[m];
      progress = true;
    }
  }
  for (std::size_t r = 0; r < ranks.size(); ++r)
    ASSERT_EQ(next[r], ranks[r].plan.gradients.size()) << "deadlock at rank " << r;
}

// Every layout under every ZeRO stage.
std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (Layout l : {Layout{1, 1, 1, false}, Layout{1, 4, 1, false}, Layout{2, 1, 1, true},
                   Layout{1, 3, 2, false}, Layout{2, 3, 2, true}, Layout{2, 2, 4, false},
                   Layout{4, 2, 2, true}, Layout{1, 4, 4, false}})
    for (int stage : {0, 1, 2, 3}) {
      l.zero_stage = stage;
      all.push_back(l);
    }
  return all;
}

TEST(ReductionPlan, EveryGradientIsSummedOverDataParallelismOnceAndOwnersTileTheBuffer) {
  for (const Layout& l : layouts()) {
    const std::vector<RankPlan> ranks = plans_of(l);
    const bool sharded = l.zero_stage >= 1 && l.dp > 1;
    for (const RankPlan& r : ranks) {
      std::vector<int> summed(r.plan.buffer_size, 0);
      for (const RangeReduction& op : r.plan.gradients)
        if (op.axis == ParallelAxis::dp && op.kind != RangeReduction::Kind::all_gather)
          for (std::size_t i = op.range.begin; i < op.range.end; ++i) ++summed[i];
      EXPECT_EQ(r.plan.gradients_by_segment, sharded && l.zero_stage >= 2) << describe(l);
      EXPECT_EQ(r.plan.parameters_by_segment, sharded && l.zero_stage == 3) << describe(l);
      const ElementRange whole{0, r.plan.buffer_size};
      EXPECT_EQ(r.plan.gradient_range, r.plan.gradients_by_segment ? r.plan.owned : whole);
      EXPECT_EQ(r.plan.parameter_range, r.plan.parameters_by_segment ? r.plan.owned : whole);
      if (r.plan.gradients_by_segment) {
        // The segments tile the layout, and each is summed over dp by its own reduce-scatter.
        std::size_t next = 0;
        for (const ParameterSegment& segment : r.layout.segments()) {
          EXPECT_EQ(segment.range.begin, next) << describe(l) << " " << segment.name;
          next = segment.range.end;
          for (std::size_t i = segment.range.begin; i < segment.range.end; ++i) ++summed[i];
        }
        EXPECT_EQ(next, r.layout.total()) << describe(l);
        // Everything else the plan does stays inside the owned range.
        for (const RangeReduction& op : r.plan.gradients)
          EXPECT_EQ(intersect(op.range, r.plan.owned), op.range) << describe(l);
      }
      for (std::size_t i = 0; i < r.layout.total(); ++i)
        ASSERT_EQ(summed[i], l.dp > 1 ? 1 : 0) << describe(l) << " element " << i;
      EXPECT_GE(r.plan.buffer_size, r.layout.total());
      if (!sharded) {
        EXPECT_EQ(r.plan.owned, (ElementRange{0, r.plan.buffer_size})) << describe(l);
      }
      EXPECT_EQ(r.plan.parameters.empty(), !sharded || l.zero_stage == 3) << describe(l);
    }
    // The data-parallel ranks of a replica own disjoint shards that tile the buffer.
    for (const RankPlan& r : ranks) {
      if (r.at.dp != 0) continue;
      std::size_t next = 0;
      for (int dp = 0; dp < l.dp; ++dp) {
        const RankPlan& owner = ranks[static_cast<std::size_t>(
            Mesh::world_rank_of(MeshShape{l.tp, l.pp, l.dp}, r.at.tp, dp, r.at.pp))];
        EXPECT_EQ(owner.plan.buffer_size, r.plan.buffer_size) << describe(l);
        if (!sharded) continue;
        EXPECT_EQ(owner.plan.owned.begin, next) << describe(l);
        next = owner.plan.owned.end;
      }
      if (sharded) {
        EXPECT_EQ(next, r.plan.buffer_size) << describe(l);
      }
    }
  }
}

TEST(ReductionPlan, TheNormCountsEveryLogicalElementOnce) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kShape);
  for (const Layout& l : layouts()) {
    const std::vector<RankPlan> ranks = plans_of(l);
    // Summed over tp and pp: once per replica; sharded, over dp too: once in the job.
    const bool sharded = l.zero_stage >= 1 && l.dp > 1;
    for (int dp = 0; dp < (sharded ? 1 : l.dp); ++dp) {
      std::map<std::string, std::vector<int>> counted;
      for (const TensorView& t : whole.tensors())
        counted[t.name].assign(static_cast<std::size_t>(t.size), 0);
      for (const RankPlan& r : ranks) {
        if (!sharded && r.at.dp != dp) continue;
        for (const TensorView& t : r.layout.tensors())
          for (const ElementRange& range : r.plan.norm_ranges) {
            const ElementRange part = intersect(range, {t.offset, t.offset + t.size});
            for (std::size_t i = part.begin; i < part.end; ++i)
              ++counted[t.name][static_cast<std::size_t>(
                  t.slice.logical_index(static_cast<std::int64_t>(i - t.offset)))];
          }
      }
      for (const auto& [name, counts] : counted)
        for (std::size_t i = 0; i < counts.size(); ++i)
          ASSERT_EQ(counts[i], 1) << describe(l) << " " << name << "[" << i << "]";
    }
  }
}

TEST(ReductionPlan, TiedEmbeddingCopiesStayBitwiseEqualAndSumEveryContribution) {
  for (const Layout& l : layouts()) {
    const std::vector<RankPlan> ranks = plans_of(l);
    std::vector<std::vector<float>> buffers;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (const RankPlan& r : ranks) {
      buffers.emplace_back(r.plan.buffer_size);
      for (float& g : buffers.back()) g = uniform(rng);
    }
    const std::vector<std::vector<float>> before = buffers;
    simulate(l, ranks, buffers);
    if (l.pp == 1) continue;
    std::size_t checked = 0;
    for (std::size_t a = 0; a < ranks.size(); ++a) {
      if (!ranks[a].partition.has_embedding) continue;
      // The last stage with the same tp and dp coordinates.
      const std::size_t b = static_cast<std::size_t>(Mesh::world_rank_of(
          MeshShape{l.tp, l.pp, l.dp}, ranks[a].at.tp, ranks[a].at.dp, l.pp - 1));
      // The wte elements the two exchange (sharded: the ones this dp rank owns on both ends).
      ElementRange exchanged;
      for (const RangeReduction& op : ranks[a].plan.gradients)
        if (op.kind == RangeReduction::Kind::tied_exchange) exchanged = op.range;
      for (const RangeReduction& op : ranks[b].plan.gradients)
        if (op.kind == RangeReduction::Kind::tied_exchange) {
          EXPECT_EQ(op.range, exchanged) << describe(l);
        }
      for (std::size_t e = exchanged.begin; e < exchanged.end; ++e, ++checked) {
        ASSERT_EQ(buffers[a][e], buffers[b][e])
            << describe(l) << " rank " << a << " wte[" << e << "]";
        // The sum of both ends' contributions over every replica.
        double expected = 0;
        for (std::size_t r = 0; r < ranks.size(); ++r)
          if (ranks[r].at.tp == ranks[a].at.tp &&
              (ranks[r].partition.has_embedding || ranks[r].partition.has_head))
            expected += before[r][e];  // wte leads every layout that holds it
        ASSERT_NEAR(buffers[a][e], expected, 1e-4) << describe(l);
      }
    }
    // Every wte element of each tp slice is exchanged once per replica, or once in the job when
    // sharded.
    const bool sharded = l.zero_stage >= 1 && l.dp > 1;
    const std::size_t wte_size = ranks[0].layout.at("wte").size;
    EXPECT_EQ(checked, wte_size * l.tp * (sharded ? 1 : l.dp)) << describe(l);
  }
}

TEST(ReductionPlan, NoStageFour) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  EXPECT_THROW(make_reduction_plan(layout, {ModelPartition::whole(kShape), 0, 2, 0, 1, 4}), Error);
}

// A range's pieces on the shards: the sizes of its intersections, in rank order, zeros included.
TEST(ReductionPlan, ShardCountsSplitARangeAtShardBoundaries) {
  ReductionPlan plan;
  plan.buffer_size = 4 * 64;  // shards [0, 64), [64, 128), [128, 192), [192, 256)
  EXPECT_EQ(shard_counts(plan, {10, 20}, 4), (std::vector<std::size_t>{10, 0, 0, 0}));
  EXPECT_EQ(shard_counts(plan, {60, 140}, 4), (std::vector<std::size_t>{4, 64, 12, 0}));
  EXPECT_EQ(shard_counts(plan, {192, 256}, 4), (std::vector<std::size_t>{0, 0, 0, 64}));
  EXPECT_EQ(shard_counts(plan, {5, 5}, 4), (std::vector<std::size_t>{0, 0, 0, 0}));
}

// Virtual pipeline stages (interleaved, zbv): the partitions and plans the trainer builds
// (plan/placement.h) hold every layer once over the pipeline, each in layer order, and the tied
// wte is exchanged only between two different ranks: zbv's rank 0 holds the embedding and the
// head, one wte for both, and exchanges nothing; every logical element is in some norm range once.
TEST(ReductionPlan, VirtualStagePartitionsHoldEveryLayerOnce) {
  struct Case {
    std::string schedule;
    int pp, chunks, zero_stage;
  };
  for (const Case& c : {Case{"interleaved", 2, 2, 0}, Case{"interleaved", 2, 3, 1},
                        Case{"zbv", 2, 2, 0}, Case{"zbv", 4, 2, 2}, Case{"zbv", 2, 2, 3}}) {
    SCOPED_TRACE(c.schedule + " pp " + std::to_string(c.pp) + " v " + std::to_string(c.chunks));
    const int dp = c.zero_stage > 0 ? 2 : 1;
    const Config config = parse_config(
        "data: {train: t}\nmodel: {n_layer: 8, n_head: 4, d_model: 32, seq_len: 16, "
        "vocab_size: 200}\nparallel: {pp: " +
            std::to_string(c.pp) + ", dp: " + std::to_string(dp) +
            ", pipeline_schedule: " + c.schedule + ", virtual_stages: " + std::to_string(c.chunks) +
            ", zero: {stage: " + std::to_string(c.zero_stage) + "}}\n",
        "c.yaml");
    const GptShape shape{8, 4, 32, 16, 200};
    const MeshShape mesh{1, c.pp, dp};
    std::vector<int> layer_holders(8, 0);
    std::map<std::string, std::vector<int>> counted;
    const ParameterLayout whole = ParameterLayout::for_gpt(shape);
    for (const TensorView& t : whole.tensors()) counted[t.name].assign(t.size, 0);
    for (int stage = 0; stage < c.pp; ++stage) {
      bool exchanges = false;  // some dp rank exchanges its owned part of wte
      for (int dp_rank = 0; dp_rank < dp; ++dp_rank) {
        const ReductionPlacement placement =
            reduction_placement(config, shape, mesh, 0, stage, dp_rank);
        const ModelPartition& p = placement.partition;
        ASSERT_EQ(p.chunks(), c.chunks);
        EXPECT_EQ(p.has_embedding, stage == 0);
        EXPECT_EQ(p.has_head, c.schedule == "zbv" ? stage == 0 : stage == c.pp - 1);
        if (dp_rank == 0)
          for (int chunk = 0; chunk < p.chunks(); ++chunk)
            for (int l = p.chunk_layers(chunk).begin; l < p.chunk_layers(chunk).end; ++l)
              ++layer_holders[static_cast<std::size_t>(l)];
        const ParameterLayout layout = ParameterLayout::for_partition(shape, p);
        const ReductionPlan plan = make_reduction_plan(layout, placement);
        for (const RangeReduction& op : plan.gradients)
          exchanges = exchanges || op.kind == RangeReduction::Kind::tied_exchange;
        if (dp_rank > 0 && !plan.sharded) continue;  // replicas count their copy once
        for (const TensorView& t : layout.tensors())
          for (const ElementRange& range : plan.norm_ranges) {
            const ElementRange part = intersect(range, {t.offset, t.offset + t.size});
            for (std::size_t i = part.begin; i < part.end; ++i)
              ++counted[t.name][static_cast<std::size_t>(
                  t.slice.logical_index(static_cast<std::int64_t>(i - t.offset)))];
          }
      }
      EXPECT_EQ(exchanges, c.schedule == "interleaved" && (stage == 0 || stage == c.pp - 1));
    }
    EXPECT_EQ(layer_holders, std::vector<int>(8, 1));
    for (const auto& [name, counts] : counted)
      for (std::size_t i = 0; i < counts.size(); ++i) ASSERT_EQ(counts[i], 1) << name << i;
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Expert parallelism at stage 0 (dp 4, ep 2): the dense tensors are summed over dp and the
// experts over expert_dp, in runs that tile the buffer; the norm counts the dense tensors on ep
// rank 0 only and adds the ep group; with ep = dp nothing sums the experts (each is held once).
TEST(ReductionPlan, ExpertParallelismSumsExpertsOverTheirReplicasOnly) {
  MoeConfig moe;
  moe.experts = 4;
  moe.every = 2;
  const GptShape shape{4, 4, 32, 16, 200, moe};
  for (const int ep : {2, 4}) {
    for (int ep_rank = 0; ep_rank < ep; ++ep_rank) {
      ModelPartition p = ModelPartition::whole(shape);
      p.ep_rank = ep_rank;
      p.ep_size = ep;
      const ParameterLayout layout = ParameterLayout::for_partition(shape, p);
      EXPECT_TRUE(layout.has("h.1.moe.experts." + std::to_string(ep_rank * 4 / ep) + ".fc.weight"));
      EXPECT_FALSE(layout.has("h.1.moe.experts." + std::to_string((ep_rank + 1) % ep * 4 / ep) +
                              ".fc.weight"));
      ReductionPlacement placement{p, ep_rank, 4, 0, 1, 0};
      const ReductionPlan plan = make_reduction_plan(layout, placement);
      std::size_t covered = 0;
      for (const RangeReduction& op : plan.gradients) {
        ASSERT_EQ(op.kind, RangeReduction::Kind::all_reduce);
        EXPECT_EQ(op.range.begin, covered) << "runs in layout order, expert runs skipped at ep 4";
        // Every tensor of the run is of the run's kind.
        for (const TensorView& t : layout.tensors()) {
          if (op.range.begin <= t.offset && t.offset < op.range.end) {
            EXPECT_EQ(op.axis, is_expert_tensor(t) ? ParallelAxis::expert_dp : ParallelAxis::dp)
                << t.name;
          }
        }
        covered = op.range.end;
        // At ep 4 (= dp) the expert runs are absent: the next op starts after them.
        if (ep == 4)
          for (const TensorView& t : layout.tensors())
            if (is_expert_tensor(t) && t.offset == covered) covered += t.size;
      }
      if (ep == 4)
        for (const TensorView& t : layout.tensors())
          if (is_expert_tensor(t) && t.offset == covered) covered += t.size;
      EXPECT_EQ(covered, layout.total());
      EXPECT_EQ(plan.norm_axes.back(), ParallelAxis::ep);
      std::size_t counted = 0, experts = 0;
      for (const ElementRange& r : plan.norm_ranges) counted += r.size();
      for (const TensorView& t : layout.tensors())
        if (is_expert_tensor(t)) experts += t.size;
      EXPECT_EQ(counted, ep_rank == 0 ? layout.total() : experts);
      // The expert shares of the ranks holding the same experts tile the layout.
      std::size_t shared = 0;
      for (int replica = 0; replica < 4 / ep; ++replica) {
        ReductionPlacement r = placement;
        r.dp_rank = replica * ep + ep_rank;
        shared += replica_share(layout, r).size();
      }
      EXPECT_EQ(shared, ParameterLayout::padded_size(layout.total(), 4 / ep));
    }
  }
  // ZeRO stage 1 under ep 2 of dp 4: the dense runs summed over ep, then the shards of the two
  // ranks holding the same experts reduce-scattered over expert_dp and gathered back.
  ModelPartition p = ModelPartition::whole(shape);
  p.ep_size = 2;
  p.ep_rank = 1;
  const ParameterLayout layout = ParameterLayout::for_partition(shape, p);
  const ReductionPlan plan = make_reduction_plan(layout, ReductionPlacement{p, 3, 4, 0, 1, 1});
  ASSERT_FALSE(plan.summed_over_ep.empty());
  ASSERT_EQ(plan.gradients.size(), plan.summed_over_ep.size() + 1);
  for (std::size_t i = 0; i < plan.summed_over_ep.size(); ++i)
    EXPECT_EQ(plan.gradients[i], (RangeReduction{RangeReduction::Kind::all_reduce, ParallelAxis::ep,
                                                 plan.summed_over_ep[i], -1}));
  EXPECT_EQ(plan.gradients.back().kind, RangeReduction::Kind::reduce_scatter);
  EXPECT_EQ(plan.gradients.back().axis, ParallelAxis::expert_dp);
  EXPECT_EQ(plan.parameters.at(0).axis, ParallelAxis::expert_dp);
  EXPECT_EQ(plan.owned, layout.shard(1, 2));  // dp rank 3 is expert_dp rank 1 of 2
  EXPECT_EQ(plan.norm_axes, (std::vector<ParallelAxis>{ParallelAxis::tp, ParallelAxis::pp,
                                                       ParallelAxis::ep, ParallelAxis::expert_dp}));
}

}  // namespace
}  // namespace strata
