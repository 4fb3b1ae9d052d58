#include "parallel/swarm/stage_registry.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "parallel/elastic/signed_store.h"

namespace strata {

StageRegistry::StageRegistry(const StageRegistrySettings& settings)
    : settings_(settings), watch_(settings.timeout_s) {
  if (settings_.group.empty()) throw std::runtime_error("swarm.group is empty");
  store_ =
      open_group_store(settings_.store_url, settings_.secret, std::min(settings_.timeout_s, 10.0));
  check_shared_settings(*store_, key("settings"), settings_.shared_settings, settings_.difference,
                        "swarm '" + settings_.group + "' (" + store_->url() + ")");
}

StageRegistry::~StageRegistry() { leave("exit"); }

std::int64_t StageRegistry::join(int stage, const std::string& endpoint) {
  if (id_ >= 0) throw std::logic_error("StageRegistry::join: joined already");
  id_ = store_->add(key("next_peer"), 1) - 1;
  stage_ = stage;
  endpoint_ = endpoint;
  store_->set(peer_key("heartbeat", id_), store_bytes("0"));
  store_->set(peer_key("peer", id_), store_bytes(std::to_string(stage) + " " + endpoint));
  const std::string beat = peer_key("heartbeat", id_);
  heartbeat_ = std::make_unique<HeartbeatThread>(
      *store_, [beat] { return beat; }, settings_.timeout_s);
  return id_;
}

void StageRegistry::move(int stage) {
  stage_ = stage;
  store_->set(peer_key("peer", id_), store_bytes(std::to_string(stage) + " " + endpoint_));
}

std::vector<SwarmPeerRecord> StageRegistry::live_peers() {
  const std::int64_t peers = store_->add(key("next_peer"), 0);  // a counter: read by adding 0
  std::vector<SwarmPeerRecord> live;
  for (std::int64_t id = 0; id < peers; ++id) {
    if (dead_.contains(id)) continue;
    if (store_->get(peer_key("dead", id))) {
      dead_.insert(id);
      continue;
    }
    const auto record = store_->get(peer_key("peer", id));
    if (!record) continue;  // joining: its record comes right after its id
    if (id != id_ && watch_.silent(*store_, peer_key("heartbeat", id))) {
      store_->create(peer_key("dead", id), store_bytes("missed heartbeats"));
      dead_.insert(id);
      continue;
    }
    SwarmPeerRecord peer;
    peer.id = id;
    std::istringstream words(store_text(*record));
    words >> peer.stage >> peer.endpoint;
    if (const auto speed = store_->get(peer_key("speed", id)))
      peer.samples_per_second = std::stod(store_text(*speed));
    live.push_back(peer);
  }
  return live;
}

std::vector<SwarmPeerRecord> StageRegistry::stage_peers(int stage) {
  std::vector<SwarmPeerRecord> peers = live_peers();
  std::erase_if(peers, [stage](const SwarmPeerRecord& p) { return p.stage != stage; });
  return peers;
}

// A peer that has not published yet counts as the mean of those that have (1 when none has), so
// a stage of new peers does not look empty.
int StageRegistry::least_served_stage() {
  const std::vector<SwarmPeerRecord> peers = live_peers();
  double published = 0;
  int publishers = 0;
  for (const SwarmPeerRecord& p : peers)
    if (p.samples_per_second > 0) published += p.samples_per_second, publishers += 1;
  const double unknown = publishers > 0 ? published / publishers : 1.0;
  std::vector<double> speed(static_cast<std::size_t>(settings_.stages), 0.0);
  for (const SwarmPeerRecord& p : peers)
    if (p.stage >= 0 && p.stage < settings_.stages)
      speed[static_cast<std::size_t>(p.stage)] +=
          p.samples_per_second > 0 ? p.samples_per_second : unknown;
  return static_cast<int>(std::min_element(speed.begin(), speed.end()) - speed.begin());
}

void StageRegistry::publish_speed(double samples_per_second) {
  store_->set(peer_key("speed", id_), store_bytes(std::to_string(samples_per_second)));
}

void StageRegistry::leave(const std::string& why) {
  if (left_) return;
  left_ = true;
  if (heartbeat_) heartbeat_->stop();
  if (id_ < 0) return;
  try {
    store_->create(peer_key("dead", id_), store_bytes(why));
  } catch (const StoreUnavailable&) {  // the others will find it silent instead
  }
}

}  // namespace strata
