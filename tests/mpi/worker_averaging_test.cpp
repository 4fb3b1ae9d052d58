// Averaging across DiLoCo workers (parallel/worker_averaging.h), run inside mpirun with one rank
// per worker (4 and 8): butterfly equals all_reduce's mean to 1e-6; dropped workers and owners
// behave as specified; moshpit on a full grid reaches the exact mean after d rounds; gossip pairs
// end equal and its consensus distance falls every round; the pairings and groups are what they
// claim to be. No training involved.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <set>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/worker_averaging.h"

namespace strata {
namespace {

constexpr std::size_t kCount = 1003;  // not a multiple of the worker count

float value(int worker, std::size_t i) {
  return static_cast<float>(std::sin(0.11 * static_cast<double>(i) + 0.7 * worker) * (1 + worker));
}

std::vector<float> vector_of(int worker) {
  std::vector<float> v(kCount);
  for (std::size_t i = 0; i < kCount; ++i) v[i] = value(worker, i);
  return v;
}

// The mean over `workers` (all when empty) of element i, in double.
double mean_of(std::size_t i, int k, const std::vector<bool>& dropped = {}) {
  double sum = 0;
  int live = 0;
  for (int w = 0; w < k; ++w)
    if (dropped.empty() || !dropped[static_cast<std::size_t>(w)]) {
      sum += value(w, i);
      ++live;
    }
  return sum / live;
}

struct World {
  MpiCommunicator comm{MPI_COMM_WORLD, 1};
  int k = comm.size(), me = comm.rank();
};

TEST(WorkerAveraging, AllReduceAndButterflyGiveTheMean) {
  World w;
  for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly}) {
    std::vector<float> v = vector_of(w.me);
    average_across_workers(w.comm, algorithm, v.data(), kCount, {});
    for (std::size_t i = 0; i < kCount; ++i)
      ASSERT_NEAR(v[i], mean_of(i, w.k), 1e-6 * (1 + std::fabs(mean_of(i, w.k))))
          << static_cast<int>(algorithm) << " element " << i;
  }
  std::vector<float> a = vector_of(w.me), b = vector_of(w.me);
  average_across_workers(w.comm, Averaging::all_reduce, a.data(), kCount, {});
  average_across_workers(w.comm, Averaging::butterfly, b.data(), kCount, {});
  for (std::size_t i = 0; i < kCount; ++i) ASSERT_NEAR(a[i], b[i], 1e-6 * (1 + std::fabs(a[i])));
}

TEST(WorkerAveraging, DroppedWorkersKeepTheirOwnAndAreLeftOut) {
  World w;
  AveragingRound round;
  round.dropped.assign(static_cast<std::size_t>(w.k), false);
  round.dropped[1] = true;  // worker 1 fails: as a peer and as butterfly's owner of chunk 1
  const std::size_t chunk = (kCount + w.k - 1) / w.k;
  for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly}) {
    std::vector<float> v = vector_of(w.me);
    average_across_workers(w.comm, algorithm, v.data(), kCount, round);
    for (std::size_t i = 0; i < kCount; ++i) {
      const bool owner_failed = algorithm == Averaging::butterfly && i / chunk == 1;
      if (w.me == 1 || owner_failed) {
        ASSERT_EQ(v[i], value(w.me, i)) << "worker " << w.me << " element " << i;
      } else {
        ASSERT_NEAR(v[i], mean_of(i, w.k, round.dropped), 1e-6 * (1 + std::fabs(v[i])));
      }
    }
  }
}

TEST(WorkerAveraging, MoshpitOnAFullGridReachesTheExactMeanAfterDRounds) {
  World w;
  const int d = moshpit_dimensions(w.k, 2);
  ASSERT_EQ(1 << d, w.k);  // 4 or 8 workers: a full grid of groups of 2
  std::vector<float> v = vector_of(w.me);
  for (int r = 0; r < d; ++r) {
    AveragingRound round;
    round.round = r;
    average_across_workers(w.comm, Averaging::moshpit, v.data(), kCount, round);
    if (r + 1 < d) {  // not yet: some element still differs from the mean
      double off = 0;
      for (std::size_t i = 0; i < kCount; ++i)
        off = std::max(off, std::fabs(v[i] - mean_of(i, w.k)));
      EXPECT_GT(off, 1e-3) << "round " << r;
    }
  }
  for (std::size_t i = 0; i < kCount; ++i)
    ASSERT_NEAR(v[i], mean_of(i, w.k), 1e-5 * (1 + std::fabs(mean_of(i, w.k)))) << i;
  // A worker that fails leaves its group: it keeps its own, its partner its own too (groups of 2).
  AveragingRound failing;
  failing.dropped.assign(static_cast<std::size_t>(w.k), false);
  failing.dropped[0] = true;
  std::vector<float> u = vector_of(w.me);
  average_across_workers(w.comm, Averaging::moshpit, u.data(), kCount, failing);
  const std::vector<int> group = moshpit_group(w.me, w.k, 2, 0);
  const bool with_failed = std::find(group.begin(), group.end(), 0) != group.end();
  if (with_failed) {
    EXPECT_EQ(u, vector_of(w.me));
  }
}

TEST(WorkerAveraging, GossipPairsEndEqualAndConsensusDistanceFalls) {
  World w;
  std::vector<float> v = vector_of(w.me);
  double distance = consensus_distance(w.comm, v.data(), kCount);
  for (int r = 0; r < 6; ++r) {
    AveragingRound round;
    round.round = r;
    round.seed = 5;
    average_across_workers(w.comm, Averaging::gossip, v.data(), kCount, round);
    // The pair ended bitwise equal.
    const int partner = gossip_partners(5, r, w.k)[static_cast<std::size_t>(w.me)];
    std::vector<float> theirs(kCount);
    w.comm.send_recv(v.data(), kCount, partner, theirs.data(), kCount, partner);
    EXPECT_EQ(theirs, v) << "round " << r;
    const double next = consensus_distance(w.comm, v.data(), kCount);
    // Falls every round until consensus (4 workers reach it after 2 rounds: two disjoint pairings).
    if (distance > 1e-6) {
      EXPECT_LT(next, distance) << "round " << r;
    } else {
      EXPECT_LE(next, 1e-6) << "round " << r;
    }
    distance = next;
  }
}

TEST(WorkerAveraging, PairingsGroupsAndDropsAreWhatTheyClaim) {
  for (int k : {2, 5, 8}) {
    for (std::int64_t r = 0; r < 4; ++r) {
      const std::vector<int> partner = gossip_partners(3, r, k);
      int alone = 0;
      for (int w = 0; w < k; ++w) {
        EXPECT_EQ(partner[static_cast<std::size_t>(partner[static_cast<std::size_t>(w)])], w);
        alone += partner[static_cast<std::size_t>(w)] == w;
      }
      EXPECT_EQ(alone, k % 2);
      if (r > 0 && k > 2) {  // two workers have one pairing only
        EXPECT_NE(partner, gossip_partners(3, r - 1, k)) << "a pairing repeated";
      }
      // Moshpit's groups of a round partition the workers.
      std::set<int> seen;
      for (int w = 0; w < k; ++w) {
        const std::vector<int> group = moshpit_group(w, k, 2, r);
        EXPECT_NE(std::find(group.begin(), group.end(), w), group.end());
        for (int m : group) EXPECT_EQ(moshpit_group(m, k, 2, r), group);
        seen.insert(w);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), k);
    }
    EXPECT_NE(gossip_partners(3, 0, k == 2 ? 2 : k),
              std::vector<int>(static_cast<std::size_t>(k), 0));
  }
  EXPECT_EQ(dropped_workers(1, 7, 6, 0.0), std::vector<bool>(6, false));
  EXPECT_EQ(dropped_workers(1, 7, 6, 0.5), dropped_workers(1, 7, 6, 0.5));
  int drops = 0;
  for (std::int64_t r = 0; r < 200; ++r)
    for (bool d : dropped_workers(1, r, 5, 0.3)) drops += d;
  EXPECT_NEAR(drops / 1000.0, 0.3, 0.05);
  EXPECT_EQ(moshpit_dimensions(8, 2), 3);
  EXPECT_EQ(moshpit_dimensions(9, 3), 2);
  EXPECT_EQ(moshpit_dimensions(10, 3), 3);
}

}  // namespace
}  // namespace strata
