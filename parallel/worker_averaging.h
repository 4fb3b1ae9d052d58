// Averaging a vector across DiLoCo workers (the decentralized family of DESIGN §2 and the DiLoCo
// issue): each function runs over `group`, one rank per worker (group rank = worker index), every
// worker calling it with its own vector, and leaves in `values` what that worker ends the round
// with. Sums are fp32, in member order. A worker in `dropped` failed this round (simulated
// failures: a pure function of (seed, round, worker), so every worker agrees on who failed): it
// still takes part in the collectives (contributing nothing) so the others do not wait, and it
// ends the round with its own values unchanged.
//
//   all_reduce: every live worker gets the mean of the live workers' vectors (ring all-reduce of
//     the masked vectors and of the live count).
//   butterfly:  the vector is cut into k chunks, chunk o owned by worker o; every worker sends
//     each owner its chunk (all-to-all), each owner averages what its live peers sent and sends
//     the average back (all-gather). A dropped peer is left out of every average; a dropped
//     owner's chunk stays at each worker's own value. No drops: all_reduce's mean, summed in
//     another order.
//   gossip:     each round a perfect matching of the workers (one sits out when k is odd) from a
//     seeded order and a round-robin schedule (gossip_partners: consecutive rounds never repeat a
//     pairing; over k-1 rounds every pair meets, so the topology is connected); each pair
//     replaces both vectors by their average. A worker whose partner dropped keeps its own. No
//     global consensus: see consensus_distance.
//   moshpit:    workers on a d-dimensional grid of groups of size M (M^d ≥ k; worker w has the
//     base-M digits of w as coordinates); round r averages inside the groups of workers that
//     share every coordinate but digit r mod d (dropped workers leave their group that round). On
//     a full grid (M^d = k) every worker holds the exact mean after d consecutive rounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace strata {

enum class Averaging { all_reduce, butterfly, gossip, moshpit };
// "all_reduce" | "butterfly" | "gossip" | "moshpit" (diloco.averaging); else an Error.
Averaging averaging_from_name(const std::string& name);

struct AveragingRound {
  std::int64_t round = 0;      // the outer step: gossip's pairing, moshpit's dimension
  std::uint64_t seed = 0;      // gossip's pairing
  std::vector<bool> dropped;   // per worker (empty: none)
  int moshpit_group_size = 2;  // M
};

// Which workers fail in `round` when each fails with probability p: a pure function of (seed,
// round, worker).
std::vector<bool> dropped_workers(std::uint64_t seed, std::int64_t round, int workers, double p);

void average_across_workers(Communicator& group, Averaging algorithm, float* values,
                            std::size_t count, const AveragingRound& round);

// Gossip's pairing of `round`: partner[w] (w itself when left out).
std::vector<int> gossip_partners(std::uint64_t seed, std::int64_t round, int workers);
// Moshpit's grid: the number of dimensions d for k workers in groups of M (the least d with
// M^d ≥ k), and the workers of w's group in `round`, ascending.
int moshpit_dimensions(int workers, int group_size);
std::vector<int> moshpit_group(int worker, int workers, int group_size, std::int64_t round);

// mean over workers of ‖θ_w − θ̄‖ / ‖θ̄‖ (θ̄ the mean of all workers' vectors), the same on every
// worker: how far gossip is from consensus. Collective over `group`.
double consensus_distance(Communicator& group, const float* values, std::size_t count);

}  // namespace strata
