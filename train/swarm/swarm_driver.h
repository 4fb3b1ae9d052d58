// The first stage's peer drives the swarm's micro-batches (docs/ARCHITECTURE.md §2 "SWARM"): it
// reads its part of the training data, runs the first stage itself, and sends each micro-batch
// forward through stages 1 … S−1 and backward again, one request per stage and direction, each
// to a peer that the stage's stochastic wiring (parallel/swarm/stochastic_wiring.h) picks. A
// request that times out is sent to another peer of the stage, so no micro-batch is lost to a
// peer's death; a stage left without live peers pauses the pipeline until one joins, and the
// driver says so.
//
// Data: a driver takes global micro-batch ids from the store (swarm_progress.h), so drivers that
// come and go read every micro-batch once, and one driver reads what a pipeline of global_batch =
// swarm.target_batch reads. The first stage's backward of each micro-batch is claimed into its
// rounds as a server's is (stage_rounds.h). Its console and metrics.jsonl lines are the first
// stage's steps: the mean loss of the micro-batches this driver drove in the round, val_loss every
// train.eval_every steps and after the last.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "parallel/swarm/stage_registry.h"
#include "parallel/swarm/stochastic_wiring.h"
#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"
#include "train/metrics/metrics.h"
#include "train/swarm/stage_checkpoints.h"
#include "train/swarm/stage_rounds.h"
#include "train/swarm/swarm_progress.h"
#include "train/swarm/swarm_stage.h"
#include "train/training_data.h"

namespace strata {

class SwarmDriver {
 public:
  // Not owned; all outlive the driver. `server`: this peer's own, served between micro-batches.
  SwarmDriver(const Config& config, SwarmStage& stage, StageRounds& rounds, StageRegistry& registry,
              RpcServer& server, SwarmProgress& progress, const TrainingData& data,
              MetricsWriter& metrics, StageCheckpoints& checkpoints);

  // Drives micro-batches until the swarm's are all taken and have come through (or a stop
  // signal). Returns the reason it stopped, for the deathrattle.
  std::string run();

 private:
  // Micro-batch g of training: its loss sum (Σ over B·T targets).
  double train_micro_batch(std::int64_t g);
  // The first stage's step at the end of a round: its lines, and evaluation when due.
  void finish_round();
  // val_loss through the swarm (the windows of docs/ARCHITECTURE.md §5 "Evaluation").
  double validation_loss();
  double split_loss(const TokenSource& split);
  // The output of stages 1 … S−2 for `batch` sequences whose first stage gave `first_output`:
  // each stage's input, the first stage's output first.
  std::vector<std::vector<float>> forward_through(std::vector<float> first_output, int batch,
                                                  std::int64_t g);
  // `request` answered by a peer of `stage`: retried on another peer after a timeout, waiting
  // while the stage has none.
  RpcMessage call(int stage, StageWork work, int samples, const RpcMessage& request);
  // Payload bytes this driver's requests and their replies moved so far, as its client counted
  // them: all of them, and those of training (evaluation's left out).
  std::int64_t sent_bytes() const;
  std::int64_t training_bytes() const;
  // The stage's live peers from the registry, into its wiring.
  void refresh_peers(int stage);

  const Config& config_;
  SwarmStage& stage_;
  StageRounds& rounds_;
  StageRegistry& registry_;
  RpcServer& server_;
  SwarmProgress& progress_;
  const TrainingData& data_;
  MetricsWriter& metrics_;
  StageCheckpoints& checkpoints_;
  RpcClient client_;
  std::vector<StageWiring> wiring_;                // per stage (0 unused)
  std::vector<std::int64_t> sequence_;             // per stage: requests sent
  std::map<std::int64_t, std::string> endpoints_;  // peer id: where it answers
  double refreshed_at_ = -1;
  double round_loss_ = 0;  // Σ loss of this driver's micro-batches in the round
  int round_batches_ = 0;
  std::int64_t evaluation_bytes_ = 0;
  std::chrono::steady_clock::time_point round_start_;
};

}  // namespace strata
