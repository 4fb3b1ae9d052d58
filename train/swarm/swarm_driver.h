// The first stage's peer drives the swarm's micro-batches (docs/ARCHITECTURE.md §2 "SWARM"): it
// reads its part of the training data, runs the first stage itself, and sends each micro-batch
// forward through stages 1 … S−1 and backward again, one request per stage and direction, each
// to a peer that the stage's stochastic wiring (parallel/swarm/stochastic_wiring.h) picks. A
// request that times out is sent to another peer of the stage, so no micro-batch is lost to a
// peer's death; a stage left without live peers pauses the pipeline until one joins, and the
// driver says so.
//
// Data: micro-batch j of the driver reads global samples (j·parts + part)·micro_batch + b, so
// one driver (part 0 of 1) reads what a pipeline of global_batch = swarm.target_batch reads.
// Its console and metrics.jsonl lines are the first stage's steps: the mean loss of the
// micro-batches it drove in the round, val_loss every train.eval_every steps.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "parallel/swarm/stage_registry.h"
#include "parallel/swarm/stochastic_wiring.h"
#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"
#include "train/metrics/metrics.h"
#include "train/swarm/swarm_stage.h"
#include "train/training_data.h"

namespace strata {

class SwarmDriver {
 public:
  // Not owned; all outlive the driver. `server`: this peer's own, served between micro-batches.
  SwarmDriver(const Config& config, SwarmStage& stage, StageRegistry& registry, RpcServer& server,
              const TrainingData& data, MetricsWriter& metrics);

  // Drives micro-batches until the first stage has made train.steps steps (or a stop signal).
  // Returns the reason it stopped, for the deathrattle.
  std::string run();

 private:
  // One micro-batch of training: its loss sum (Σ over B·T targets).
  double train_micro_batch(std::int64_t index);
  // val_loss through the swarm (the windows of docs/ARCHITECTURE.md §5 "Evaluation").
  double validation_loss();
  double split_loss(const TokenSource& split);
  // The output of stages 1 … S−2 for `batch` sequences whose first stage gave `first_output`:
  // each stage's input, the first stage's output first.
  std::vector<std::vector<float>> forward_through(std::vector<float> first_output, int batch);
  // `request` answered by a peer of `stage`: retried on another peer after a timeout, waiting
  // while the stage has none.
  RpcMessage call(int stage, StageWork work, int samples, const RpcMessage& request);
  // The stage's live peers from the registry, into its wiring.
  void refresh_peers(int stage);

  const Config& config_;
  SwarmStage& stage_;
  StageRegistry& registry_;
  RpcServer& server_;
  const TrainingData& data_;
  MetricsWriter& metrics_;
  RpcClient client_;
  std::vector<StageWiring> wiring_;                // per stage (0 unused)
  std::vector<std::int64_t> sequence_;             // per stage: requests sent
  std::map<std::int64_t, std::string> endpoints_;  // peer id: where it answers
  double refreshed_at_ = -1;
};

}  // namespace strata
