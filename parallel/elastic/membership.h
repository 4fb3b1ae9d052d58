// What a membership kept in the rendezvous store is built from (docs/ARCHITECTURE.md §2 "Elastic
// DiLoCo", "SWARM"): the settings every member must share, a token no other member holds, and
// liveness. A member advances a counter at its heartbeat key on a thread of its own; the others
// judge it by whether that counter moves, on their own clock, so hosts need no common time.
// Elastic DiLoCo's group (elastic_group.h) and a swarm's peers (parallel/swarm/stage_registry.h)
// are built from these.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "parallel/elastic/rendezvous_store.h"

namespace strata {

// Seconds on this host's steady clock (differences only).
double steady_seconds();
void sleep_seconds(double seconds);
// How often a member beats: ten times per timeout, so one late beat never drops it, within
// [0.1 s, 2 s] so a long timeout still shows life.
double heartbeat_period(double timeout_s);
// A token no other member shares: host, process and a random number.
std::string member_token();

// The settings of `key`: written by the first member (true), else compared with this member's:
// an std::runtime_error "<what>: <why>" when they differ, `why` from `difference` (the message
// naming the key that differs; "" when two spellings of one config agree after all). When `store`
// signs its records (a SignedStore), the settings take the key itself, never an alternate name:
// a member whose secret is not the group's, who has one where the group has none (or none where
// it has one), or who finds a forged record there is refused here, before it takes a slot, rather
// than found a second group beside the first.
void check_shared_settings(RendezvousStore& store, const std::string& key, const std::string& mine,
                           const std::function<std::string(const std::string&)>& difference,
                           const std::string& what);

// Advances the counter at key() every heartbeat_period(timeout_s) until stopped (key() is asked
// each beat: a member's key may change). A store that does not answer is warned about once, and
// again when it answers.
class HeartbeatThread {
 public:
  HeartbeatThread(RendezvousStore& store, std::function<std::string()> key, double timeout_s);
  ~HeartbeatThread() { stop(); }
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;
  void stop();

 private:
  void run();
  RendezvousStore& store_;
  std::function<std::string()> key_;
  double timeout_s_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// An observer's view of other members' heartbeats.
class SilenceWatch {
 public:
  explicit SilenceWatch(double timeout_s) : timeout_s_(timeout_s) {}
  // Whether the counter at `key`, now reading `value` ("" when absent), has not moved for the
  // timeout as this observer saw it; the first look starts its clock.
  bool silent(const std::string& key, const std::string& value);
  // Reads the counter at `key` from `store` and judges it.
  bool silent(RendezvousStore& store, const std::string& key);
  // Whether a counter read `before` and then `now` shows life: it grew (an integer), or changed.
  static bool moved(const std::string& before, const std::string& now);

 private:
  struct Observed {
    std::string value;
    double since = 0;
  };
  double timeout_s_;
  std::map<std::string, Observed> observed_;
};

}  // namespace strata
