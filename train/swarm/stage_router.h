// Where a swarm driver's requests go (docs/ARCHITECTURE.md §2 "SWARM"): each stage's live peers,
// read from the registry (parallel/swarm/stage_registry.h) about once a second, the stage's
// stochastic wiring (parallel/swarm/stochastic_wiring.h) that picks a peer for each request, and
// the retries: a request that times out, or that its peer declines (it moved to another stage),
// goes to another peer of the stage; a stage without live peers makes the caller wait, and the
// router says so once per wait.
//
// Thread-safe: the driver's lanes (swarm_driver.h) call it concurrently, each with its own
// RpcClient; the wiring, the peers' endpoints and the registry are behind one mutex, never held
// during a request. It counts the payload bytes of the requests and replies it carries, training's
// and evaluation's apart.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "parallel/swarm/stage_registry.h"
#include "parallel/swarm/stochastic_wiring.h"
#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"

namespace strata {

class StageRouter {
 public:
  // Stages 1 … stages−1 (the caller is stage 0). `registry` is not owned and outlives the router.
  StageRouter(const Config& config, StageRegistry& registry, int stages);

  // `request` (of `samples` samples) answered by a peer of `stage`, sent through `client`.
  // `evaluation`: counted as evaluation's bytes.
  RpcMessage call(int stage, StageWork work, int samples, const RpcMessage& request,
                  RpcClient& client, bool evaluation = false);

  // Payload bytes of the requests sent and replies received so far.
  std::int64_t training_bytes() const;
  std::int64_t evaluation_bytes() const;

 private:
  // The stage's live peers into its wiring; the caller holds mutex_.
  void refresh(int stage);
  void refresh_if_due();

  const Config& config_;
  StageRegistry& registry_;
  mutable std::mutex mutex_;
  std::vector<StageWiring> wiring_;                // per stage (0 unused)
  std::vector<std::int64_t> sequence_;             // per stage: requests sent
  std::map<std::int64_t, std::string> endpoints_;  // peer id: where it answers
  double refreshed_at_ = -1;
  std::int64_t training_bytes_ = 0, evaluation_bytes_ = 0;
};

}  // namespace strata
