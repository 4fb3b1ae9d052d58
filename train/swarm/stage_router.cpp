#include "train/swarm/stage_router.h"

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include "parallel/elastic/membership.h"
#include "train/stop_signal.h"
#include "train/swarm/stage_requests.h"

namespace strata {

namespace {

// How often the router reads the stages' peers from the store when nothing failed.
constexpr double kRefreshSeconds = 1.0;

WiringSettings wiring_settings(const Config& config) {
  WiringSettings s;
  s.routing = config.swarm.routing;
  s.ban_s = config.swarm.timeout;
  return s;
}

}  // namespace

StageRouter::StageRouter(const Config& config, StageRegistry& registry, int stages)
    : config_(config),
      registry_(registry),
      wiring_(static_cast<std::size_t>(stages), StageWiring(wiring_settings(config))),
      sequence_(static_cast<std::size_t>(stages), 0) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (int k = 1; k < stages; ++k) refresh(k);
  refreshed_at_ = steady_seconds();
}

void StageRouter::refresh(int stage) {
  std::vector<std::int64_t> ids;
  for (const SwarmPeerRecord& p : registry_.stage_peers(stage)) {
    ids.push_back(p.id);
    endpoints_[p.id] = p.endpoint;
  }
  wiring_.at(static_cast<std::size_t>(stage)).set_peers(ids);
}

void StageRouter::refresh_if_due() {
  if (steady_seconds() - refreshed_at_ <= kRefreshSeconds) return;
  for (int k = 1; k < static_cast<int>(wiring_.size()); ++k) refresh(k);
  refreshed_at_ = steady_seconds();
}

std::int64_t StageRouter::training_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return training_bytes_;
}

std::int64_t StageRouter::evaluation_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return evaluation_bytes_;
}

RpcMessage StageRouter::call(int stage, StageWork work, int samples, const RpcMessage& request,
                             RpcClient& client, bool evaluation) {
  StageWiring& wiring = wiring_.at(static_cast<std::size_t>(stage));
  std::unique_lock<std::mutex> lock(mutex_);
  refresh_if_due();
  const std::int64_t sequence = sequence_.at(static_cast<std::size_t>(stage))++;
  std::vector<std::int64_t> tried;
  double waiting_since = -1;
  while (true) {
    const double now = steady_seconds();
    const std::optional<WiringChoice> choice = wiring.choose(work, samples, sequence, tried, now);
    if (!choice) {
      // Every known peer failed or was tried: look again in the store, waiting for one (a peer
      // that failed stays listed, banned, until it is found dead).
      refresh(stage);
      tried.clear();
      const bool none = wiring.peers().empty();
      if (none && waiting_since < 0) {
        waiting_since = now;
        std::printf("swarm: stage %d has no live peer; the pipeline waits for one to join\n",
                    stage);
        std::fflush(stdout);
      }
      if (stop_requested()) throw std::runtime_error("stopped by signal");
      lock.unlock();
      sleep_seconds(none ? 0.2 : 0.05);
      lock.lock();
      continue;
    }
    if (waiting_since >= 0) {
      std::printf("swarm: stage %d has a peer again after %.1f s\n", stage, now - waiting_since);
      std::fflush(stdout);
      waiting_since = -1;
    }
    const std::string endpoint = endpoints_.at(choice->peer);
    lock.unlock();
    const double start = steady_seconds();
    std::optional<RpcMessage> reply;
    std::string declined;
    try {
      reply = client.call(endpoint, request, config_.swarm.request_timeout);
    } catch (const RpcError& e) {
      // A peer that moved to another stage (or is moving) declines; any other error is a bug.
      const std::string what = e.what();
      const std::size_t at = what.find(swarm::kDeclined);
      if (at == std::string::npos) throw;
      declined = what.substr(at + std::string(swarm::kDeclined).size());
    }
    const double seconds = steady_seconds() - start;
    lock.lock();
    std::int64_t& bytes = evaluation ? evaluation_bytes_ : training_bytes_;
    bytes += static_cast<std::int64_t>(request.payload.size());
    if (reply) {
      bytes += static_cast<std::int64_t>(reply->payload.size());
      wiring.finished(*choice, seconds);
      return std::move(*reply);
    }
    if (!declined.empty())
      std::printf("swarm: peer %lld of stage %d declined '%s' (%s); sending it to another\n",
                  static_cast<long long>(choice->peer), stage, request.method.c_str(),
                  declined.c_str());
    else
      std::printf(
          "swarm: peer %lld of stage %d did not answer '%s' within %g s; sending it to "
          "another\n",
          static_cast<long long>(choice->peer), stage, request.method.c_str(),
          config_.swarm.request_timeout);
    std::fflush(stdout);
    wiring.failed(*choice, steady_seconds());
    client.disconnect(endpoint);
    tried.push_back(choice->peer);
  }
}

}  // namespace strata
