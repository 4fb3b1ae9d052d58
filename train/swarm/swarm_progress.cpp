#include "train/swarm/swarm_progress.h"

#include "train/swarm/swarm_stage.h"

namespace strata {

namespace {

std::int64_t run_micro_batches(const Config& config) {
  const int steps = config.train.stop_after > 0 ? config.train.stop_after : config.train.steps;
  return static_cast<std::int64_t>(steps) * swarm_target_batch(config) / config.train.micro_batch;
}

}  // namespace

SwarmProgress::SwarmProgress(const Config& config, RendezvousStore& store)
    : config_(config),
      store_(store),
      total_(run_micro_batches(config)),
      watch_(config.swarm.timeout) {}

std::string SwarmProgress::key(const char* name) const {
  return config_.swarm.group + "/data/" + name;
}

void SwarmProgress::start_at(std::int64_t first) {
  store_.create(key("first"), store_bytes(std::to_string(first)));
}

std::optional<std::int64_t> SwarmProgress::first() {
  if (!first_)
    if (const std::optional<std::vector<char>> value = store_.get(key("first")))
      first_ = std::stoll(store_text(*value));
  return first_;
}

std::optional<std::int64_t> SwarmProgress::take() {
  const std::int64_t g = *first() + store_.add(key("next"), 1) - 1;
  if (g >= total_) return std::nullopt;
  return g;
}

void SwarmProgress::completed_one() { store_.add(key("completed"), 1); }

bool SwarmProgress::drained() {
  // No driver has started: nothing was taken.
  if (!first()) return false;
  if (*first_ + store_.add(key("next"), 0) < total_) return false;
  const std::int64_t completed = store_.add(key("completed"), 0);
  return *first_ + completed >= total_ ||
         watch_.silent(key("completed"), std::to_string(completed));
}

}  // namespace strata
