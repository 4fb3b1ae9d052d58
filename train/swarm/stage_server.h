// A peer serving stage k ≥ 1 of a swarm (docs/ARCHITECTURE.md §2 "SWARM"): it answers the
// requests of stage_requests.h with its SwarmStage, counts each micro-batch's backward into the
// stage's rounds (a duplicate adds nothing; a full round is averaged before the next claim) and,
// between requests, averages a round that other peers filled. It serves until the swarm's data
// has drained (swarm_progress.h) and its drivers have left (their last evaluation passes through
// the stages), averaging a last round that holds samples (a partial one after a peer was lost).
#pragma once

#include <cstdint>
#include <string>

#include "parallel/swarm/stage_registry.h"
#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"
#include "train/core/test_hooks.h"
#include "train/metrics/metrics.h"
#include "train/swarm/stage_checkpoints.h"
#include "train/swarm/stage_rounds.h"
#include "train/swarm/swarm_progress.h"
#include "train/swarm/swarm_stage.h"

namespace strata {

class StageServer {
 public:
  // Not owned; all outlive the server.
  StageServer(const Config& config, SwarmStage& stage, StageRounds& rounds, RpcServer& server,
              StageRegistry& registry, SwarmProgress& progress, MetricsWriter& metrics,
              StageCheckpoints& checkpoints, const TestHooks& hooks);
  // Serves to the end; the reason it stopped.
  std::string run();
  // One request (std::runtime_error on a malformed one).
  RpcMessage handle(const RpcMessage& request);

 private:
  // Averages the current round, logs the stage's step and checkpoints it when due.
  void finish_round();

  const Config& config_;
  SwarmStage& stage_;
  StageRounds& rounds_;
  RpcServer& server_;
  StageRegistry& registry_;
  SwarmProgress& progress_;
  MetricsWriter& metrics_;
  StageCheckpoints& checkpoints_;
  const TestHooks& hooks_;
  std::int64_t requests_ = 0;
};

// The metrics.jsonl line and, every log_every steps, the console line of a stage's step.
void report_stage_step(const Config& config, int stage, const StageStep& step,
                       std::int64_t requests, MetricsWriter& metrics);

}  // namespace strata
