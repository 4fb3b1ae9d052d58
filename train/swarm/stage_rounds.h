// The rounds of one stage of a swarm (docs/ARCHITECTURE.md §2 "SWARM"): which micro-batches'
// gradients each round sums across the stage's peers, and the averaging that ends it.
//
// Accounting, in the rendezvous store under "<swarm>/stage<k>/":
//   mb/<g>             micro-batch g's claim, created by the first peer of the stage to take its
//                      backward (its value: the round): a later backward of g (a request re-sent
//                      after a timeout, which its first peer may still have served) returns the
//                      input's gradient but adds nothing, so every sample enters a stage's step
//                      once
//   round/<r>/samples  the samples claimed in round r (an atomic add): a claim that finds the
//                      round at swarm.target_batch already belongs to the next round, which this
//                      peer starts only after averaging round r
// Micro-batch ids g are global: the drivers take them from "<swarm>/data/next" (swarm_driver.h).
//
// The averaging of a full round is elastic DiLoCo's (train/diloco/elastic_worker.h), the stage's
// peers being the workers of the group "<swarm>/stage<k>" with swarm.stage_peers slots and round
// r its sync r: every live peer arrives once the round is full, the members sum their gradients
// and held samples over Gloo, and the sum is applied as a transaction (a member that dies in the
// middle makes the others average again without it). Each member applies Σ gradients ·
// target / Σ held: a peer that died took the gradients it held with it, and the round is the mean
// over the samples that remain. A peer that joins a stage that has averaged before arrives as a
// joiner, contributes nothing and takes the stage's state (weights, optimizer state, step count)
// from the first contributor, bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "parallel/comm/mpi_communicator.h"
#include "parallel/elastic/record_signing.h"
#include "parallel/elastic/rendezvous_store.h"
#include "plan/config.h"
#include "train/core/test_hooks.h"
#include "train/diloco/elastic_worker.h"
#include "train/swarm/swarm_stage.h"

namespace strata {

class StageRounds {
 public:
  // Takes a slot in the stage's group. `world`: this one-process job. `secret`: swarm.secret_file's
  // (null: none), for the stage's store records.
  StageRounds(const Config& config, int stage, MpiCommunicator& world, const TestHooks& hooks,
              std::shared_ptr<const SharedSecret> secret);
  ~StageRounds();

  // Before serving: a stage that has averaged before is joined (the state taken at the end of
  // its current round, waiting for it); a fresh stage starts from the seed's weights, or, when
  // `resumed`, from the state and step already loaded into `stage` (stage_checkpoints.h). Returns
  // the line saying which.
  std::string start(SwarmStage& stage, bool resumed);

  std::int64_t round() const { return round_; }
  // Samples whose gradients this peer holds in the current round.
  int held() const { return held_; }
  // Micro-batch g's backward of `samples` samples: `add` it to this round, it is a `duplicate`
  // (add nothing), or the round is `full` (finish() it first, then claim again).
  enum class Claim { add, duplicate, full };
  Claim claim(std::int64_t micro_batch, int samples);
  // The current round has reached its target (read from the store).
  bool full();
  // The current round holds any sample, of any peer (read from the store).
  bool pending();
  // The averaging of the full round and the stage's step (or the joiner's handover). Returns the
  // step made, with how many samples the round averaged over.
  StageStep finish(SwarmStage& stage);

  void leave(const std::string& why) { group_->leave(why); }

 private:
  std::string key(const std::string& name) const { return prefix_ + name; }
  // Takes the stage's state from the first contributor of `m` (a joiner), or gives it.
  void hand_over(SwarmStage& stage, const SyncMembers& m);

  const Config& config_;
  int stage_index_;
  const TestHooks& hooks_;
  std::string prefix_;   // "<swarm>/stage<k>/"
  Config group_config_;  // the stage's averaging group as elastic DiLoCo's keys
  std::unique_ptr<ElasticWorker> group_;
  std::unique_ptr<RendezvousStore> store_;  // the claims' and counters' connection
  std::int64_t round_ = 0;
  bool joining_ = false;
  int held_ = 0;  // samples whose gradients this peer holds in the round
};

}  // namespace strata
