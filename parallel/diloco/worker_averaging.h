// Averaging a vector across DiLoCo workers (the decentralized family of docs/ARCHITECTURE.md §2
// "DiLoCo", and the DiLoCo issue): each function runs over `group`, one rank per worker
// (group rank = worker index), every worker calling it with its own vector, and leaves in `values`
// what that worker ends the round with. A worker in `dropped` failed this round (simulated
// failures: a pure function of (seed, round, worker), so every worker knows who failed without
// being told): it sends nothing of its own, takes part only where a collective needs every member
// (a ring all-reduce, an owner's all-gather), and ends the round with its own values unchanged.
// When every worker dropped, or the group is one worker, nothing is sent and values (and residual)
// stay as they were, bit for bit.
//
// Compression (diloco.compression, parallel/diloco/outer_compression.h). What crosses the wire is
// exactly the compress() bytes of each payload, nothing else: no flags, no counts. Every sum is
// fp32 over decompress_add of those bytes, in member order (all_reduce none: the ring's order), so
// the members that compute the same average get it bitwise equal; a worker's own contribution
// enters its sums as the round trip of what it sent (with format none: its values, exactly). With
// error feedback (`residual`, count floats, nullable), a worker sends compress(values + residual)
// and keeps residual = (values + residual) − the round trip, for the part of its vector it actually
// sends this round only: a dropped worker, a gossip worker that sits out or whose partner dropped,
// a butterfly chunk whose owner dropped, leave their residual untouched. With format none the
// residual ends 0.
//
//   all_reduce: every live worker gets the mean of the live workers' vectors.
//     none: ring all-reduce of the vectors (a dropped worker's as zeros); live count known locally.
//     compressed: a ring cannot sum compressed values without re-quantising at every hop (n − 1
//     roundings, and the error of each hop on a different ring position), so the sum is a
//     reduce-scatter by all-to-all instead: chunk o, [o·c, min(count, (o+1)·c)) with c = ⌈count/k⌉
//     (the last ones may be short or empty), goes compressed to worker o, which sums the live
//     workers' chunks in worker order, divides by the live count, and all-gathers its average
//     compressed; every worker decompresses every chunk. Two roundings per value: the contribution
//     and the average. An owner that dropped still averages (it only loses its own contribution).
//     Bitwise equal on every live worker.
//   butterfly:  the same scatter–gather in every format (none included), except that a dropped
//     owner is left out: nobody sends it a chunk, it gathers nothing, and its chunk stays at each
//     worker's own original values. A dropped peer is left out of every average. No drops, format
//     none: all_reduce's mean, summed in another order.
//   gossip:     each round a perfect matching of the workers (one sits out when k is odd) from a
//     seeded order and a round-robin schedule (gossip_partners: consecutive rounds never repeat a
//     pairing; over k-1 rounds every pair meets, so the topology is connected). Both partners
//     send their compressed vector (send_recv) and replace theirs by (lower worker's round trip +
//     higher worker's round trip) · 0.5, bitwise equal at both ends. A pair with a dropped worker
//     sends nothing and both keep their own. No global consensus: see consensus_distance.
//   moshpit:    workers on a d-dimensional grid of groups of size M (M^d ≥ k; worker w has the
//     base-M digits of w as coordinates); round r averages inside the groups of workers that
//     share every coordinate but digit r mod d. The live members of a group pass their compressed
//     vectors around a ring of the live members (m − 1 hops) and each sums all of them in member
//     order and divides by m; dropped members leave the group that round, and a member left alone
//     keeps its own. On a full grid (M^d = k) with format none every worker holds the exact mean
//     after d consecutive rounds.
//
// Excluded workers (AveragingRound::excluded; contributing = neither dropped nor excluded): an
// average is over the contributing workers only, and an excluded worker ends with it. all_reduce
// none: it sends zeros into the ring; compressed all_reduce and butterfly: it sends no chunk but
// owns, sums and gathers as usual; gossip: the pair exchanges as usual and an excluded worker takes
// its partner's round trip while the partner keeps its own values (two excluded: both keep
// theirs); moshpit: the group's ring carries every live member's payload and the average is over
// its contributing members (none: each keeps its own). Bytes are as without exclusion, except that
// an excluded worker's scatter is empty. No contributing worker at all: values stay as they were.
//
// Robust rules (aggregation.rule trimmed_mean or centered_clip, all_reduce only): a sum cannot
// tell an outlier, so every contributing worker's compressed vector reaches every worker (a ring
// all-gather of compress(values + residual), uneven: non-contributors send nothing) and each
// non-dropped worker applies the rule to the round trips, in worker order, itself: bitwise equal
// everywhere, one collective (no round trip per CenteredClip iteration over a slow link).
//
// Bytes (averaging_bytes_sent; exactly what the group's CommStats counts, communicator.h's model):
// with P(c) = compressed_bytes(c, format), c_o the size of chunk o, L the live workers,
//   all_reduce, none   ring_all_reduce_bytes(4·count, k) on every worker
//   all_reduce, else   Σ_{o≠w} P(c_o) if w is live; plus the all-gather of chunks P(c_o),
//                      Σ_o P(c_o) − P(c_{w+1 mod k}) on every worker
//   butterfly          as all_reduce compressed with only live owners: Σ_{o≠w, o∈L} P(c_o) if w
//                      is live, plus Σ_{o∈L} P(c_o) − (P(c_{w+1}) if w+1 ∈ L)
//   gossip             P(count) when w and its partner are both live, else 0
//   moshpit            (m − 1) · P(count) for a live worker of a group with m ≥ 2 live members
//   a robust rule      the ring all-gather of P(count) from each contributing worker:
//                      Σ_{q contributing} P(count) − (P(count) if w+1 contributes)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/diloco/averaging.h"
#include "parallel/diloco/outer_compression.h"
#include "parallel/diloco/robust_aggregation.h"

namespace strata {

struct AveragingRound {
  std::int64_t round = 0;      // the outer step: gossip's pairing, moshpit's dimension
  std::uint64_t seed = 0;      // gossip's pairing
  std::vector<bool> dropped;   // per worker (empty: none)
  int moshpit_group_size = 2;  // M
  // Per worker (empty: none): screened out (parallel/diloco/robust_aggregation.h). Its vector
  // enters no average, but unlike a dropped worker it takes part as usual and ends the round with
  // what the others' vectors give it (see "Excluded workers" above).
  std::vector<bool> excluded;
  // How the contributions combine: the mean, or with all_reduce a rule of robust_aggregation.h
  // (see "Robust rules" above).
  AggregationSettings aggregation;
};

// Which workers fail in `round` when each fails with probability p: a pure function of (seed,
// round, worker).
std::vector<bool> dropped_workers(std::uint64_t seed, std::int64_t round, int workers, double p);

// values: count floats, this worker's vector in, what it ends the round with out. residual: null
// (no error feedback) or count floats, carried from one call to the next by the caller.
void average_across_workers(Communicator& group, Averaging algorithm, float* values,
                            std::size_t count, const AveragingRound& round,
                            OuterCompression format = OuterCompression::none,
                            float* residual = nullptr);

// Bytes worker `worker` sends in one average_across_workers call of `count` values.
std::uint64_t averaging_bytes_sent(Averaging algorithm, OuterCompression format, std::size_t count,
                                   int workers, int worker, const AveragingRound& round);

// Bytes worker `worker` sends in the screen's exchange of outer gradient norms before each sync
// (train/diloco/diloco.h): one double from every worker to every other, a ring all-gather.
std::uint64_t screening_bytes_sent(int workers, int worker);

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
