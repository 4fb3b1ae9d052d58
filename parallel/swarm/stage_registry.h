// Who serves which stage of a swarm (docs/ARCHITECTURE.md §2 "SWARM"), kept in the rendezvous
// store of elastic DiLoCo (parallel/elastic/rendezvous_store.h): a file store or Redis, chosen by
// URL. Each peer of the swarm holds one StageRegistry.
//
// Keys, under "<swarm>/":
//   settings       the settings every peer shares, written by the first (membership.h)
//   next_peer      a counter: peer ids in join order
//   peer/<id>      "<stage> <endpoint>": the stage the peer serves and where it answers requests;
//                  rewritten when it moves to another stage
//   heartbeat/<id> the counter its heartbeat thread advances; a peer is judged by whether it moves
//                  on the observer's own clock (membership.h SilenceWatch)
//   dead/<id>      its deathrattle: why it left ("exit", a signal, an error), or "missed
//                  heartbeats" when another peer found it silent for swarm.timeout
//   speed/<id>     the samples per second it measured serving its stage, published now and then
//                  (swarm.stage auto picks the stage with the least)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "parallel/elastic/membership.h"
#include "parallel/elastic/record_signing.h"
#include "parallel/elastic/rendezvous_store.h"

namespace strata {

struct StageRegistrySettings {
  std::string store_url;  // swarm.join
  std::string group;      // swarm.group
  int stages = 2;         // the length of swarm.stages
  double timeout_s = 60;  // swarm.timeout
  // The settings every peer shares (as text) and what makes this peer's differ from the swarm's
  // (membership.h check_shared_settings).
  std::string shared_settings;
  std::function<std::string(const std::string& swarm_settings)> difference;
  std::shared_ptr<const SharedSecret> secret;  // swarm.secret_file's; null: none
};

struct SwarmPeerRecord {
  std::int64_t id = -1;
  int stage = -1;
  std::string endpoint;
  double samples_per_second = 0;  // published; 0 before its first
  bool operator==(const SwarmPeerRecord&) const = default;
};

class StageRegistry {
 public:
  // Opens the store and checks or writes the swarm's settings. An unreachable store or settings
  // that differ throw std::runtime_error with the message of the `error:` line.
  explicit StageRegistry(const StageRegistrySettings& settings);
  // Leaves a deathrattle ("exit") unless leave() said why already.
  ~StageRegistry();
  StageRegistry(const StageRegistry&) = delete;
  StageRegistry& operator=(const StageRegistry&) = delete;

  // Joins the swarm serving `stage` at `endpoint`: takes the next peer id and starts beating.
  std::int64_t join(int stage, const std::string& endpoint);
  // This peer now serves `stage` (rebalancing).
  void move(int stage);
  std::int64_t id() const { return id_; }
  int stage() const { return stage_; }

  // The live peers, by id (this one included once joined). A peer silent for the timeout is
  // declared dead here (its deathrattle written), so every observer soon agrees.
  std::vector<SwarmPeerRecord> live_peers();
  // The live peers of `stage`, by id.
  std::vector<SwarmPeerRecord> stage_peers(int stage);
  // swarm.stage auto: the stage with the least published samples per second over its live peers
  // (a stage without peers first; ties: the lowest stage).
  int least_served_stage();
  // This peer's measured samples per second (its stage's work).
  void publish_speed(double samples_per_second);

  // The deathrattle: why this peer leaves; the heartbeat stops.
  void leave(const std::string& why);
  RendezvousStore& store() { return *store_; }
  const StageRegistrySettings& settings() const { return settings_; }

 private:
  std::string key(const std::string& name) const { return settings_.group + "/" + name; }
  std::string peer_key(const std::string& what, std::int64_t id) const {
    return key(what + "/" + std::to_string(id));
  }

  StageRegistrySettings settings_;
  std::unique_ptr<RendezvousStore> store_;
  std::int64_t id_ = -1;
  int stage_ = -1;
  std::string endpoint_;
  SilenceWatch watch_;
  std::set<std::int64_t> dead_;  // peers known dead (a deathrattle is final)
  bool left_ = false;
  std::unique_ptr<HeartbeatThread> heartbeat_;
};

}  // namespace strata
