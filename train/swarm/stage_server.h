// A peer serving stage k ≥ 1 of a swarm (docs/ARCHITECTURE.md §2 "SWARM"): it answers the
// requests of stage_requests.h with its SwarmStage, counts each micro-batch's backward into the
// stage's rounds (a duplicate adds nothing; a full round is averaged before the next claim) and,
// between requests, averages a round that other peers filled. It serves until the swarm's data
// has drained (swarm_progress.h) and its drivers have left (their last evaluation passes through
// the stages), averaging a last round that holds samples (a partial one after a peer was lost).
//
// Rebalancing: the server measures the samples per second its stage's work takes it (busy time
// only, a backward counting as the wiring counts it) and publishes it about once a second; every
// swarm.rebalance_every seconds, at the end of a round or while idle, it writes a `swarm` metrics
// line (each stage's peers and throughput, the moves so far) and, when parallel/swarm/
// stage_rebalance.h picks it, leaves its stage for the bottleneck (holding none of a round's
// gradients, or for a stage without peers, which stops the pipeline): it takes itself off its stage
// in the registry, declines any request from then on (the drivers send them to another peer), and
// run() returns the stage to serve next (the peer joins it as any new peer does:
// train/swarm/swarm_peer.cpp).
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

// Why a server stopped serving its stage, and the stage it moves to (−1: it leaves the swarm).
struct ServeEnd {
  std::string why;
  int move_to = -1;
};

class StageServer {
 public:
  // Not owned; all outlive the server.
  StageServer(const Config& config, SwarmStage& stage, StageRounds& rounds, RpcServer& server,
              StageRegistry& registry, SwarmProgress& progress, MetricsWriter& metrics,
              StageCheckpoints& checkpoints, const TestHooks& hooks);
  // Serves to the end, or until it moves.
  ServeEnd run();
  // One request (std::runtime_error on a malformed one).
  RpcMessage handle(const RpcMessage& request);

 private:
  // Averages the current round, logs the stage's step and checkpoints it when due; then, when a
  // rebalancing look is due, looks.
  void finish_round();
  void consider_moving();
  // The request's work into this peer's measured speed, published about once a second.
  void measure(const std::string& method, int batch, double seconds);

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
  double busy_seconds_ = 0, busy_units_ = 0;  // since the last publication
  double published_at_ = 0, looked_at_ = 0;
  bool published_ = false;
  int moving_to_ = -1;
};

// The metrics.jsonl line and, every log_every steps, the console line of a stage's step.
void report_stage_step(const Config& config, int stage, const StageStep& step,
                       std::int64_t requests, MetricsWriter& metrics);

}  // namespace strata
