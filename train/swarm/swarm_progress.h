// How far a swarm's data has gone (docs/ARCHITECTURE.md §2 "SWARM"), in the rendezvous store: the
// drivers take global micro-batch ids from "<swarm>/data/next" (micro-batch g reads samples
// g·B … g·B+B−1, whichever driver takes it) and count those that have come back through every
// stage in "<swarm>/data/completed". A run is train.steps (train.stop_after, when set) ·
// target_batch / micro_batch micro-batches: with no peer lost, exactly that many full rounds on
// every stage. A swarm resumed from its checkpoints starts at "<swarm>/data/first", which the
// first driver to start sets to its stage's step · target_batch / micro_batch.
#pragma once

#include <cstdint>
#include <optional>

#include "parallel/elastic/membership.h"
#include "parallel/elastic/rendezvous_store.h"
#include "plan/config.h"

namespace strata {

class SwarmProgress {
 public:
  // `store` is not owned and must outlive this.
  SwarmProgress(const Config& config, RendezvousStore& store);

  std::int64_t total() const { return total_; }
  // A driver, before it takes any: the swarm's data starts at micro-batch `first` unless another
  // driver said where first.
  void start_at(std::int64_t first);
  // The next micro-batch for a driver, or nullopt when the run's are all taken.
  std::optional<std::int64_t> take();
  // A micro-batch came back through every stage.
  void completed_one();
  // Every micro-batch has been taken and has come back, or none has come back for swarm.timeout
  // since they were all taken (a driver died holding one).
  bool drained();

 private:
  std::string key(const char* name) const;
  // data/first, once a driver has set it.
  std::optional<std::int64_t> first();
  const Config& config_;
  RendezvousStore& store_;
  std::int64_t total_;
  std::optional<std::int64_t> first_;
  SilenceWatch watch_;
};

}  // namespace strata
