// Collectives over the groups of the process mesh, run inside mpirun (4 and 8 ranks): on every
// group of every layout that fits the world, with nodes of 2, 3 and 4 ranks, each operation on
// every payload type (float, double, int8, uint8, int32, int64) gives the values of a direct
// computation on known per-rank data, and counts exactly the bytes of the ring model of
// parallel/comm/communicator.h (elements × element size), split into intra- and inter-node links by
// world rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "model/core/error.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/process_groups.h"
#include "tests/support/error_of.h"

namespace strata {

// Readable failures for the byte maps.
void PrintTo(LinkClass link, std::ostream* out) {
  *out << (link == LinkClass::intra_node ? "intra_node" : "inter_node");
}

namespace {

using Bytes = std::map<std::string, std::map<LinkClass, std::uint64_t>>;
using Calls = std::map<std::string, std::uint64_t>;
using testing::error_of;

// Elements per rank: small, and odd so that chunk boundaries are not accidentally aligned.
constexpr std::size_t kCount = 3;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Element i of world rank r's data, of every payload type: small integers for float and double
// (sums exact); past float's 2^24 for int32 and double's 2^53 for int64, so that a transport
// staging them through floating point would fail; and for bytes, values over the whole range.
template <class T>
T value(int rank, std::size_t i) {
  const auto index = static_cast<std::int64_t>(i);
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(1000 * rank + index);
  else if constexpr (sizeof(T) >= 4)
    return static_cast<T>((std::int64_t{rank} << (sizeof(T) == 4 ? 24 : 56)) + index);
  else
    return static_cast<T>(97 * rank + 13 * index + 200);
}

// The sum over `members` of element i (exact for every summable type and group here).
template <class T>
T sum_of(const std::vector<int>& members, std::size_t i) {
  T sum = 0;
  for (int m : members) sum += value<T>(m, i);
  return sum;
}

// Bytes are moved but never summed (model/core/data_type.h): a byte sum does not compile.
template <class T>
concept CanSum = requires(Communicator& comm, T* data) {
  comm.all_reduce_sum(data, 1);
  comm.reduce_scatter_sum(data, data, 1);
};
static_assert(CanSum<float> && CanSum<double> && CanSum<std::int32_t> && CanSum<std::int64_t>);
static_assert(!CanSum<std::int8_t> && !CanSum<std::uint8_t>);

// The link class written out again from its definition, independently of the communicator.
LinkClass link(int world_a, int world_b, int gpus_per_node) {
  return world_a / gpus_per_node == world_b / gpus_per_node ? LinkClass::intra_node
                                                            : LinkClass::inter_node;
}

// One group under test: its communicator and, from the mesh, its members' world ranks.
struct Group {
  std::string name;
  Communicator& comm;
  std::vector<int> members;
};

struct MeshGroups {
  Mesh mesh;
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<ProcessGroups> groups;

  MeshGroups(int tp, int pp, int gpus_per_node)
      : mesh(world_size(), world_rank(), tp, pp, 0, gpus_per_node),
        world(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, gpus_per_node)),
        groups(std::make_unique<ProcessGroups>(mesh, *world)) {}

  std::vector<Group> all() const {
    return {{"world", groups->world(),
             [&] {
               std::vector<int> ranks;
               for (int r = 0; r < mesh.world_size(); ++r) ranks.push_back(r);
               return ranks;
             }()},
            {"tp", groups->tp(), mesh.tp_group()},
            {"dp", groups->dp(), mesh.dp_group()},
            {"pp", groups->pp(), mesh.pp_group()},
            {"node", groups->node(), mesh.node_group()},
            {"dp_intra_node", groups->dp_intra_node(), mesh.dp_intra_node_group()},
            {"dp_inter_node", groups->dp_inter_node(), mesh.dp_inter_node_group()}};
  }
};

struct LayoutCase {
  int tp, pp, gpus_per_node;
};

// Every (tp, pp) dividing the world, with nodes of 2, 3 (a partial last node, uneven dp node
// groups) and 4 ranks, that resolve_mesh_shape accepts.
std::vector<LayoutCase> layouts() {
  std::vector<LayoutCase> cases;
  const int world = world_size();
  for (int gpus_per_node : {2, 3, 4})
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; tp * pp <= world; ++pp) {
        if (world % (tp * pp) != 0) continue;
        if (world > gpus_per_node && gpus_per_node % tp != 0) continue;
        cases.push_back({tp, pp, gpus_per_node});
      }
  return cases;
}

std::string describe(const LayoutCase& c) {
  return "tp " + std::to_string(c.tp) + " pp " + std::to_string(c.pp) + " gpus_per_node " +
         std::to_string(c.gpus_per_node);
}

// Checks one call's figures, then clears them for the next call.
void expect_stats(Communicator& comm, const Bytes& bytes, const Calls& calls, const char* what) {
  EXPECT_EQ(comm.stats().bytes, bytes) << what;
  EXPECT_EQ(comm.stats().calls, calls) << what;
  comm.reset_stats();
}

template <class T>
void check_collectives(const Group& group, int gpus_per_node) {
  SCOPED_TRACE(group.name + " group, element size " + std::to_string(sizeof(T)));
  Communicator& comm = group.comm;
  const int n = comm.size();
  const int me = comm.rank();
  const auto& members = group.members;
  ASSERT_EQ(n, static_cast<int>(members.size()));
  ASSERT_EQ(members[static_cast<std::size_t>(me)], world_rank());
  for (int r = 0; r < n; ++r) EXPECT_EQ(comm.world_rank_of(r), members[r]);
  const int self = world_rank();
  const int successor = members[static_cast<std::size_t>((me + 1) % n)];
  const LinkClass ring_link = link(self, successor, gpus_per_node);
  const std::uint64_t chunk = kCount * sizeof(T);
  const std::size_t un = static_cast<std::size_t>(n);
  comm.reset_stats();

  if constexpr (SummablePayload<T>) {
    {  // all_reduce: 2(n−1)/n of the buffer to the ring successor.
      std::vector<T> data(kCount);
      for (std::size_t i = 0; i < kCount; ++i) data[i] = value<T>(self, i);
      comm.all_reduce_sum(data.data(), kCount);
      for (std::size_t i = 0; i < kCount; ++i)
        EXPECT_EQ(data[i], sum_of<T>(members, i)) << "all_reduce element " << i;
      expect_stats(comm, {{"all_reduce", {{ring_link, 2 * (un - 1) * chunk / un}}}},
                   {{"all_reduce", 1}}, "all_reduce");
    }
    {  // reduce_scatter: this rank gets the sum of everyone's chunk `me`; sends n−1 chunks.
      std::vector<T> in(un * kCount), out(kCount, T(-1));
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<T>(self, i);
      comm.reduce_scatter_sum(in.data(), out.data(), kCount);
      for (std::size_t i = 0; i < kCount; ++i)
        EXPECT_EQ(out[i], sum_of<T>(members, static_cast<std::size_t>(me) * kCount + i))
            << "reduce_scatter element " << i;
      expect_stats(comm, {{"reduce_scatter", {{ring_link, (un - 1) * chunk}}}},
                   {{"reduce_scatter", 1}}, "reduce_scatter");
    }
  }
  {  // all_gather, out of place and in place: chunk r is rank r's input.
    std::vector<T> in(kCount), out(un * kCount, T(-1)), in_place(un * kCount, T(-1));
    for (std::size_t i = 0; i < kCount; ++i) {
      in[i] = value<T>(self, i);
      in_place[static_cast<std::size_t>(me) * kCount + i] = in[i];
    }
    comm.all_gather(in.data(), out.data(), kCount);
    comm.all_gather(in_place.data() + static_cast<std::size_t>(me) * kCount, in_place.data(),
                    kCount);
    for (std::size_t r = 0; r < un; ++r)
      for (std::size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(out[r * kCount + i], value<T>(members[r], i)) << "all_gather";
        EXPECT_EQ(in_place[r * kCount + i], value<T>(members[r], i)) << "all_gather in place";
      }
    expect_stats(comm, {{"all_gather", {{ring_link, 2 * (un - 1) * chunk}}}}, {{"all_gather", 2}},
                 "all_gather");
  }
  {  // Uneven chunks (member r holds r % 3 elements, so some hold none): the ring sends everything
     // but this rank's chunk (reduce-scatter) or its successor's (all-gather).
    std::vector<std::size_t> counts, starts;
    std::size_t total = 0;
    for (std::size_t r = 0; r < un; ++r) {
      counts.push_back(r % 3);
      starts.push_back(total);
      total += r % 3;
    }
    const std::size_t mine = counts[static_cast<std::size_t>(me)];
    const std::size_t next = counts[static_cast<std::size_t>((me + 1) % n)];
    const std::uint64_t size = sizeof(T);
    const std::uint64_t rs_bytes = un > 1 ? (total - mine) * size : 0;
    const std::uint64_t ag_bytes = un > 1 ? (total - next) * size : 0;
    if constexpr (SummablePayload<T>) {
      std::vector<T> in(total), out(mine + 1, T(-1));
      for (std::size_t i = 0; i < total; ++i) in[i] = value<T>(self, i);
      comm.reduce_scatter_sum_v(in.data(), out.data(), std::span<const std::size_t>(counts));
      for (std::size_t i = 0; i < mine; ++i)
        EXPECT_EQ(out[i], sum_of<T>(members, starts[static_cast<std::size_t>(me)] + i))
            << "reduce_scatter_v element " << i;
      EXPECT_EQ(out[mine], T(-1)) << "reduce_scatter_v wrote past its chunk";
      expect_stats(comm, {{"reduce_scatter", {{ring_link, rs_bytes}}}}, {{"reduce_scatter", 1}},
                   "reduce_scatter_v");
    }
    std::vector<T> in(mine), out(total, T(-1));
    for (std::size_t i = 0; i < mine; ++i) in[i] = value<T>(self, i);
    comm.all_gather_v(in.data(), out.data(), std::span<const std::size_t>(counts));
    for (std::size_t r = 0; r < un; ++r)
      for (std::size_t i = 0; i < counts[r]; ++i)
        EXPECT_EQ(out[starts[r] + i], value<T>(members[r], i)) << "all_gather_v";
    expect_stats(comm, {{"all_gather", {{ring_link, ag_bytes}}}}, {{"all_gather", 1}},
                 "all_gather_v");
    // The same gather started and completed later: the same result and bytes.
    std::vector<T> started(total, T(-1));
    comm.start_all_gather_v(in.data(), started.data(), std::span<const std::size_t>(counts))
        ->wait();
    EXPECT_EQ(started, out) << "start_all_gather_v";
    expect_stats(comm, {{"all_gather", {{ring_link, ag_bytes}}}}, {{"all_gather", 1}},
                 "start_all_gather_v");
  }
  {  // Uneven all_to_all: member r sends (r + p) % 3 elements to member p.
    std::vector<std::size_t> sends, receives;
    std::vector<T> in;
    Bytes expected;
    for (int p = 0; p < n; ++p) {
      sends.push_back(static_cast<std::size_t>((me + p) % 3));
      receives.push_back(static_cast<std::size_t>((p + me) % 3));
      for (std::size_t i = 0; i < sends.back(); ++i)
        in.push_back(value<T>(self, 1000 * static_cast<std::size_t>(p) + i));
      if (p != me)
        expected["all_to_all"][link(self, members[static_cast<std::size_t>(p)], gpus_per_node)] +=
            sends.back() * sizeof(T);
    }
    std::size_t received = 0;
    for (std::size_t c : receives) received += c;
    std::vector<T> out(received, T(-1));
    comm.all_to_all_v(in.data(), std::span<const std::size_t>(sends), out.data(),
                      std::span<const std::size_t>(receives));
    std::size_t at = 0;
    for (std::size_t q = 0; q < un; ++q)
      for (std::size_t i = 0; i < receives[q]; ++i, ++at)
        EXPECT_EQ(out[at], value<T>(members[q], 1000 * static_cast<std::size_t>(me) + i))
            << "all_to_all_v from group rank " << q;
    expect_stats(comm, expected, {{"all_to_all", 1}}, "all_to_all_v");
  }
  {  // all_to_all: chunk r of the output is rank r's chunk `me`; one chunk to each other member.
    std::vector<T> in(un * kCount), out(un * kCount, T(-1));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<T>(self, i);
    comm.all_to_all(in.data(), out.data(), kCount);
    Bytes expected;
    for (std::size_t r = 0; r < un; ++r) {
      for (std::size_t i = 0; i < kCount; ++i)
        EXPECT_EQ(out[r * kCount + i],
                  value<T>(members[r], static_cast<std::size_t>(me) * kCount + i))
            << "all_to_all from group rank " << r;
      if (static_cast<int>(r) != me)
        expected["all_to_all"][link(self, members[r], gpus_per_node)] += chunk;
    }
    expect_stats(comm, expected, {{"all_to_all", 1}}, "all_to_all");
  }
  // broadcast from every root: the root is charged one buffer per other member.
  for (int root = 0; root < n; ++root) {
    std::vector<T> data(kCount, T(-1));
    if (me == root)
      for (std::size_t i = 0; i < kCount; ++i) data[i] = value<T>(self, i);
    // Both forms: the typed one counts elements, the raw one bytes; they move and count the same.
    if (root % 2 == 0)
      comm.broadcast(std::span<T>(data), root);
    else
      comm.broadcast(data.data(), chunk, root);
    for (std::size_t i = 0; i < kCount; ++i)
      EXPECT_EQ(data[i], value<T>(members[static_cast<std::size_t>(root)], i))
          << "broadcast from " << root;
    Bytes expected;
    if (me == root)
      for (int r = 0; r < n; ++r)
        if (r != me) expected["broadcast"][link(self, members[r], gpus_per_node)] += chunk;
    expect_stats(comm, expected, {{"broadcast", 1}}, "broadcast");
  }
  if (n < 2) return;  // point-to-point needs a peer

  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  const int next_world = members[static_cast<std::size_t>(next)];
  const int previous_world = members[static_cast<std::size_t>(previous)];
  std::vector<T> mine(kCount);
  for (std::size_t i = 0; i < kCount; ++i) mine[i] = value<T>(self, i);
  {  // A ring of blocking send/recv, ordered so that it cannot deadlock: rank 0 starts it.
    std::vector<T> got(kCount, T(-1));
    if (me == 0) {
      comm.send(mine.data(), kCount, next);
      comm.recv(got.data(), kCount, previous);
    } else {
      comm.recv(got.data(), kCount, previous);
      comm.send(mine.data(), kCount, next);
    }
    for (std::size_t i = 0; i < kCount; ++i)
      EXPECT_EQ(got[i], value<T>(previous_world, i)) << "send/recv ring";
    expect_stats(comm, {{"send", {{link(self, next_world, gpus_per_node), chunk}}}}, {{"send", 1}},
                 "send/recv ring");
  }
  {  // The same ring as one send_recv per rank, in both directions.
    std::vector<T> from_previous(kCount, T(-1)), from_next(kCount, T(-1));
    comm.send_recv(mine.data(), kCount, next, from_previous.data(), kCount, previous);
    comm.send_recv(mine.data(), kCount, previous, from_next.data(), kCount, next);
    for (std::size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(from_previous[i], value<T>(previous_world, i)) << "send_recv ring";
      EXPECT_EQ(from_next[i], value<T>(next_world, i)) << "send_recv ring back";
    }
    Bytes expected;
    expected["send"][link(self, next_world, gpus_per_node)] += chunk;
    expected["send"][link(self, previous_world, gpus_per_node)] += chunk;
    expect_stats(comm, expected, {{"send", 2}}, "send_recv ring");
  }
  {  // An open chain like a pipeline: forward to the next stage, then backward to the previous
     // one; the ends pass -1. Rank r sends r+1 elements forward, so message sizes differ.
    const int forward_dest = me + 1 < n ? me + 1 : -1;
    const int forward_source = me > 0 ? me - 1 : -1;
    std::vector<T> send(static_cast<std::size_t>(me) + 1), got(static_cast<std::size_t>(me), T(-1));
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = value<T>(self, i);
    T untouched = T(-7);
    T* forward_recv = forward_source == -1 ? &untouched : got.data();
    comm.send_recv(send.data(), send.size(), forward_dest, forward_recv, got.size(),
                   forward_source);
    EXPECT_EQ(untouched, T(-7));
    for (std::size_t i = 0; i < got.size(); ++i)  // empty on the first stage
      EXPECT_EQ(got[i], value<T>(previous_world, i)) << "chain forward";

    // Backward: every rank sends kCount elements to the previous stage (gradients).
    std::vector<T> gradient(kCount, T(-1));
    const int backward_dest = forward_source, backward_source = forward_dest;
    comm.send_recv(mine.data(), kCount, backward_dest,
                   backward_source == -1 ? nullptr : gradient.data(), kCount, backward_source);
    if (backward_source != -1) {
      for (std::size_t i = 0; i < kCount; ++i)
        EXPECT_EQ(gradient[i], value<T>(next_world, i)) << "chain backward";
    } else {
      for (T g : gradient) EXPECT_EQ(g, T(-1)) << "no source leaves the buffer untouched";
    }

    Bytes expected;
    Calls calls;
    if (forward_dest != -1) {
      expected["send"][link(self, next_world, gpus_per_node)] += send.size() * sizeof(T);
      calls["send"] += 1;
    }
    if (backward_dest != -1) {
      expected["send"][link(self, previous_world, gpus_per_node)] += chunk;
      calls["send"] += 1;
    }
    expect_stats(comm, expected, calls, "send_recv chain");
  }
}

TEST(GroupCollectives, EveryPayloadOnEveryGroupOfEveryLayoutGivesTheDirectResultAndRingBytes) {
  for (const LayoutCase& layout : layouts()) {
    SCOPED_TRACE(describe(layout));
    MeshGroups setup(layout.tp, layout.pp, layout.gpus_per_node);
    for (const Group& group : setup.all()) {
      check_collectives<float>(group, layout.gpus_per_node);
      check_collectives<double>(group, layout.gpus_per_node);
      check_collectives<std::int8_t>(group, layout.gpus_per_node);
      check_collectives<std::uint8_t>(group, layout.gpus_per_node);
      check_collectives<std::int32_t>(group, layout.gpus_per_node);
      check_collectives<std::int64_t>(group, layout.gpus_per_node);
    }
  }
}

// The 2x2x2 mesh of 8 ranks written out by hand: one all-reduce of 4 floats (16 bytes; a 2-rank
// ring sends all of it) on each group, with nodes of 2 and of 4 ranks.
TEST(GroupCollectives, TwoByTwoByTwoLinkClassesByHand) {
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const int rank = world_rank();
  const auto intra = LinkClass::intra_node, inter = LinkClass::inter_node;
  for (int gpus_per_node : {2, 4}) {
    SCOPED_TRACE("gpus_per_node " + std::to_string(gpus_per_node));
    MeshGroups setup(2, 2, gpus_per_node);
    std::vector<float> data(4, 1.0f);
    for (const Group& group : setup.all()) group.comm.all_reduce_sum(data.data(), data.size());
    // tp {2k, 2k+1}: always one node. dp {r, r^2}: one node of 4, two nodes of 2.
    // pp {r, r^4}: always two nodes. world: successor r+1 crosses a node after each block.
    const auto& groups = *setup.groups;
    EXPECT_EQ(groups.tp().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{{intra, 16}}));
    EXPECT_EQ(groups.dp().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{{gpus_per_node == 4 ? intra : inter, 16}}));
    EXPECT_EQ(groups.pp().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{{inter, 16}}));
    const bool world_successor_crosses = (rank + 1) % gpus_per_node == 0;
    EXPECT_EQ(groups.world().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{
                  {world_successor_crosses ? inter : intra, 2 * 7 * 16 / 8}}));
    // The node group's ring never leaves the node; its size is gpus_per_node.
    EXPECT_EQ(groups.node().size(), gpus_per_node);
    EXPECT_EQ(groups.node().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{
                  {intra, 2 * static_cast<std::uint64_t>(gpus_per_node - 1) * 16 /
                              static_cast<std::uint64_t>(gpus_per_node)}}));

    // dp's two members share a node of 4 (intra-node group {r, r^2}, inter-node group {r}) and
    // sit on two nodes of 2 (intra-node group {r}, inter-node group {r, r^2}). A group of one
    // sends nothing.
    EXPECT_EQ(groups.dp_intra_node().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{{intra, gpus_per_node == 4 ? 16 : 0}}));
    EXPECT_EQ(groups.dp_inter_node().stats().bytes.at("all_reduce"),
              (std::map<LinkClass, std::uint64_t>{
                  {gpus_per_node == 4 ? intra : inter, gpus_per_node == 4 ? 0 : 16}}));

    // total_stats sums every group by kind and link class, and reset clears them all.
    const CommStats total = groups.total_stats();
    std::uint64_t sum = 0;
    for (const Group& group : setup.all()) sum += group.comm.stats().total_bytes();
    EXPECT_EQ(total.total_bytes(), sum);
    EXPECT_EQ(total.calls.at("all_reduce"), setup.all().size());
    setup.groups->reset_stats();
    EXPECT_EQ(groups.total_stats().total_bytes(), 0u);
    EXPECT_TRUE(groups.tp().stats().calls.empty());
  }
}

// The members of a group as its communicator sees them: every member's world rank, gathered
// over the group itself (int32), must be the expected list in group-rank order.
void expect_members(Communicator& comm, const std::vector<int>& expected, const char* what) {
  ASSERT_EQ(comm.size(), static_cast<int>(expected.size())) << what;
  const std::int32_t mine = world_rank();
  std::vector<std::int32_t> gathered(expected.size());
  comm.all_gather(&mine, gathered.data(), 1);
  EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), expected) << what;
}

// The data-parallel groups within and across nodes, by hand for the layouts of the brief (rank 5
// of 8 ranks, 4 per node), and from their definition for tp 1 on nodes of 2, 3 and 4 ranks: the
// members of this node, and the ranks at this rank's offset in every node that has it.
TEST(GroupCollectives, DataParallelNodeGroupsHaveTheirMembers) {
  const int world = world_size(), rank = world_rank();
  for (int gpus_per_node : {2, 3, 4}) {
    SCOPED_TRACE("tp 1, gpus_per_node " + std::to_string(gpus_per_node));
    MeshGroups setup(1, 1, gpus_per_node);
    std::vector<int> intra, inter;
    for (int r = 0; r < world; ++r) {
      if (r / gpus_per_node == rank / gpus_per_node) intra.push_back(r);
      if (r % gpus_per_node == rank % gpus_per_node) inter.push_back(r);
    }
    expect_members(setup.groups->dp_intra_node(), intra, "dp_intra_node");
    expect_members(setup.groups->dp_inter_node(), inter, "dp_inter_node");
    EXPECT_EQ(setup.mesh.dp_factors_evenly(), world % gpus_per_node == 0);
  }
  if (world != 8) return;
  MeshGroups flat(1, 1, 4), paired(2, 1, 4);
  if (rank == 5) {
    expect_members(flat.groups->dp_intra_node(), {4, 5, 6, 7}, "tp 1: dp_intra_node");
    expect_members(flat.groups->dp_inter_node(), {1, 5}, "tp 1: dp_inter_node");
    expect_members(paired.groups->dp_intra_node(), {5, 7}, "tp 2: dp_intra_node");
    expect_members(paired.groups->dp_inter_node(), {1, 5}, "tp 2: dp_inter_node");
  } else {  // every member of a group takes part in its all_gather
    expect_members(flat.groups->dp_intra_node(), flat.mesh.dp_intra_node_group(), "tp 1");
    expect_members(flat.groups->dp_inter_node(), flat.mesh.dp_inter_node_group(), "tp 1");
    expect_members(paired.groups->dp_intra_node(), paired.mesh.dp_intra_node_group(), "tp 2");
    expect_members(paired.groups->dp_inter_node(), paired.mesh.dp_inter_node_group(), "tp 2");
  }
}

// A group added by name from a key on the mesh: it has its members, is found by its name, and
// its traffic is in total_stats; names are unique, checked on every rank before any collective.
TEST(GroupCollectives, NamedGroupsFromAnyPartition) {
  MeshGroups setup(1, 1, 2);
  ProcessGroups& groups = *setup.groups;
  Communicator& parity =
      groups.add("parity", setup.mesh.members_sharing([](int r) { return r % 2; }));
  std::vector<int> same_parity;
  for (int r = world_rank() % 2; r < world_size(); r += 2) same_parity.push_back(r);
  expect_members(parity, same_parity, "parity");
  EXPECT_EQ(&groups.group("parity"), &parity);
  EXPECT_EQ(&groups.group("dp_inter_node"), &groups.dp_inter_node());
  EXPECT_EQ(&groups.group("world"), &groups.world());
  EXPECT_EQ(groups.total_stats().calls.at("all_gather"), 1u);
  groups.reset_stats();
  EXPECT_TRUE(parity.stats().calls.empty());

  EXPECT_EQ(error_of([&] { groups.add("parity", same_parity); }),
            "process group 'parity' exists already");
  EXPECT_EQ(error_of([&] { groups.add("world", same_parity); }),
            "process group name 'world' is taken");
  EXPECT_EQ(error_of([&] { groups.group("workers"); }), "no process group 'workers'");
}

TEST(GroupCollectives, SubgroupsOfSubgroupsKeepWorldRanksForLinkClasses) {
  const int world = world_size();
  MpiCommunicator world_comm(MPI_COMM_WORLD, 2);
  // Everyone in reverse order (group rank i is world rank world−1−i), then that group split into
  // the members of even and odd world rank: the second level's ranks are ranks of the first.
  std::vector<int> reversed;
  for (int r = world - 1; r >= 0; --r) reversed.push_back(r);
  const auto everyone = world_comm.subgroup(reversed);
  EXPECT_EQ(everyone->rank(), world - 1 - world_rank());
  std::vector<int> same_parity, expected_world_ranks;
  for (int i = 0; i < world; ++i)
    if ((world - 1 - i) % 2 == world_rank() % 2) {
      same_parity.push_back(i);
      expected_world_ranks.push_back(world - 1 - i);
    }
  const auto half = everyone->subgroup(same_parity);
  ASSERT_EQ(half->size(), world / 2);
  for (int i = 0; i < half->size(); ++i) EXPECT_EQ(half->world_rank_of(i), expected_world_ranks[i]);
  EXPECT_EQ(half->world_rank_of(half->rank()), world_rank());
  // Members are 2 world ranks apart, so with nodes of 2 ranks every link of this group is
  // inter-node, although the first level's ring neighbours are often on the same node.
  double x = 1;
  half->all_reduce_sum(&x, 1);
  EXPECT_EQ(x, static_cast<double>(world / 2));
  EXPECT_EQ(
      half->stats().bytes,
      (Bytes{{"all_reduce", {{LinkClass::inter_node, 2 * (world / 2 - 1) * 8 / (world / 2)}}}}));
  EXPECT_EQ(half->link_to((half->rank() + 1) % half->size()), LinkClass::inter_node);
}

TEST(GroupCollectives, BadArgumentsAreErrorsOnEveryRank) {
  // Every rank makes the same mistake, so every rank throws before entering MPI.
  MpiCommunicator world(MPI_COMM_WORLD, 2);
  float x = 0;
  EXPECT_NE(error_of([&] { world.subgroup({}); }).find("is not among its members"),
            std::string::npos);
  EXPECT_NE(error_of([&] { world.send(&x, 1, world.size()); }).find("send: peer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { world.send_recv(&x, 1, -2, &x, 1, -1); }).find("send_recv: peer -2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { world.broadcast(&x, sizeof x, -1); }).find("broadcast: peer -1"),
            std::string::npos);
  EXPECT_TRUE(world.stats().calls.empty());
}

}  // namespace
}  // namespace strata
