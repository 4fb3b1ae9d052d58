#include "train/swarm/swarm_progress.h"

#include "train/swarm/swarm_stage.h"

namespace strata {

SwarmProgress::SwarmProgress(const Config& config, RendezvousStore& store)
    : config_(config),
      store_(store),
      total_(static_cast<std::int64_t>(config.train.steps) * swarm_target_batch(config) /
             config.train.micro_batch),
      watch_(config.swarm.timeout) {}

std::string SwarmProgress::key(const char* name) const {
  return config_.swarm.group + "/data/" + name;
}

std::optional<std::int64_t> SwarmProgress::take() {
  const std::int64_t g = store_.add(key("next"), 1) - 1;
  if (g >= total_) return std::nullopt;
  return g;
}

void SwarmProgress::completed_one() { store_.add(key("completed"), 1); }

bool SwarmProgress::drained() {
  if (store_.add(key("next"), 0) < total_) return false;
  const std::int64_t completed = store_.add(key("completed"), 0);
  return completed >= total_ || watch_.silent(key("completed"), std::to_string(completed));
}

}  // namespace strata
