// SWARM's stochastic wiring (docs/ARCHITECTURE.md §2 "SWARM"): which peer of a stage gets a
// micro-batch's next piece of work. Each sender keeps one StageWiring per stage it sends to.
//
// balanced: every peer has an expected busy time, the seconds of work this sender has given it so
// far as its measured speed predicts them (an EMA of seconds per unit of work; a backward counts
// `backward_cost` units per sample, a forward one, as the server recomputes the forward before
// its backward). The next piece goes to the peer whose busy time would end lowest with it (ties:
// the lower id). A peer that joins enters at the current least busy time (with the mean speed of
// the measured ones), as SWARM's reference does, so it is not flooded with the work the others
// were given before it came. A peer that failed (a timeout, an error) is banned for `ban_s`; when
// the ban ends it returns in the same way, at no less than the least busy time of the peers in
// good standing (its own busy time stood still meanwhile).
// fixed: the peers in id order, round-robin by the work's sequence number (tests, equivalence):
// the `sequence % n`-th peer, or when that one is excluded or banned, the next one after it in id
// order (wrapping) that is not, so the other sequences keep their peers.
//
// Pure: no sockets, the caller passes the clock, so tests drive it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace strata {

enum class SwarmRouting { balanced, fixed };

// What a stage's peer is asked to do with a micro-batch.
enum class StageWork { forward, backward };

struct WiringSettings {
  SwarmRouting routing = SwarmRouting::balanced;
  double backward_cost = 2.0;  // units of work per sample of a backward (a forward: 1)
  double ema = 0.25;           // weight of the newest measurement in a peer's speed
  double ban_s = 30;           // a failed peer is not chosen for this long
  // Measurements of each peer left out of its speed: a peer's first reply includes connecting
  // and its first allocations, and a peer judged by it would get no work to correct it.
  int warmup = 1;
};

// A piece of work given to a peer: what finished() and failed() are told.
struct WiringChoice {
  std::int64_t peer = -1;
  double units = 0;             // samples × the work's units per sample
  double expected_seconds = 0;  // units × the peer's seconds per unit when chosen
};

class StageWiring {
 public:
  explicit StageWiring(const WiringSettings& settings);

  // The stage's peers now (ids, any order; repeats count once). A peer not seen before enters at
  // the least busy time of the others (of those not banned, when there are any); one no longer
  // listed is forgotten.
  void set_peers(const std::vector<std::int64_t>& peers);
  const std::vector<std::int64_t>& peers() const { return order_; }

  // The peer for the `sequence`-th piece of work of this sender to this stage: `samples` samples
  // of `work`, not one in `excluded` (peers already tried for it) nor a banned one. nullopt when
  // none is left. The chosen peer's busy time grows by the work's expected seconds. Peers whose
  // ban has ended by `now` return first.
  std::optional<WiringChoice> choose(StageWork work, int samples, std::int64_t sequence,
                                     const std::vector<std::int64_t>& excluded, double now);
  // The work finished after `seconds` (the round trip, measured by the caller): the peer's speed
  // EMA takes seconds / units (after settings.warmup measurements left out; the first one after
  // them is taken whole). A peer that has left since,
  // or seconds that are not positive, change nothing.
  void finished(const WiringChoice& choice, double seconds);
  // The work failed: the peer is banned until now + ban_s.
  void failed(const WiringChoice& choice, double now);
  bool banned(std::int64_t peer, double now) const;

  // A peer's expected seconds per sample of forward work: measured, or the mean of the measured
  // peers (1 when none is), for metrics and the stage's throughput.
  double seconds_per_unit(std::int64_t peer) const;
  // The stage's expected throughput in units per second: Σ over its peers not banned at `now` of
  // 1 / seconds_per_unit (0 without peers).
  double throughput(double now) const;
  // A peer's busy time: expected seconds of work given to it (relative; for tests and metrics).
  // A peer that is not one of the stage's throws std::invalid_argument.
  double busy(std::int64_t peer) const;

 private:
  struct Peer {
    double busy = 0;
    double seconds_per_unit = 0;  // 0: not measured yet
    double banned_until = -1;     // -1: in good standing (never banned, or returned)
    int measured = 0;             // measurements taken, the warm-up ones included
  };
  // Where a peer enters or returns: the least busy time of the peers in good standing, else of
  // all of them, else 0.
  double entry_busy() const;
  // Peers whose ban has ended by `now` return at no less than entry_busy().
  void return_from_bans(double now);
  // 1 when no peer is measured.
  double mean_measured_seconds_per_unit() const;

  WiringSettings settings_;
  std::map<std::int64_t, Peer> peers_;
  std::vector<std::int64_t> order_;  // ids ascending
};

}  // namespace strata
