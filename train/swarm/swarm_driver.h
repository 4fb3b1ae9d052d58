// The first stage's peer drives the swarm's micro-batches (docs/ARCHITECTURE.md §2 "SWARM"): it
// reads its part of the training data, runs the first stage itself, and sends each micro-batch
// forward through stages 1 … S−1 and backward again, one request per stage and direction, each
// to a peer that the stage's stochastic wiring picks (stage_router.h). A request that times out
// is sent to another peer of the stage, so no micro-batch is lost to a peer's death; a stage left
// without live peers pauses the pipeline until one joins, and the driver says so.
//
// swarm.in_flight lanes (threads, the first the caller's) each drive one micro-batch at a time,
// so that many are in flight and the stages' peers work at once; the first stage's own passes,
// its rounds and the data are taken under one mutex, the requests to the other stages are not.
// With one lane the micro-batches go one after another (the order equivalence tests need).
//
// Data: a driver takes global micro-batch ids from the store (swarm_progress.h), so drivers that
// come and go read every micro-batch once, and one driver reads what a pipeline of global_batch =
// swarm.target_batch reads. The first stage's backward of each micro-batch is claimed into its
// rounds as a server's is (stage_rounds.h). Its console and metrics.jsonl lines are the first
// stage's steps: the mean loss of the micro-batches this driver drove in the round, val_loss every
// train.eval_every steps and after the last.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "parallel/swarm/stage_registry.h"
#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"
#include "train/metrics/metrics.h"
#include "train/swarm/stage_checkpoints.h"
#include "train/swarm/stage_rounds.h"
#include "train/swarm/stage_router.h"
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
  // One lane: micro-batches one at a time until the data is all taken (or a stop, or a failure,
  // kept for run() to rethrow). `client`: the lane's own.
  void lane(RpcClient& client);
  // The next micro-batch through every stage and back; false when the run's are all taken. The
  // first stage's passes, the rounds and the data are under mutex_; the requests are not.
  bool train_micro_batch(RpcClient& client);
  // The first stage's step at the end of a round: its lines, and evaluation when due. Under
  // mutex_.
  void finish_round(RpcClient& client);
  // val_loss through the swarm (the windows of docs/ARCHITECTURE.md §5 "Evaluation").
  double validation_loss(RpcClient& client);
  double split_loss(const TokenSource& split, RpcClient& client);
  // The output of stages 1 … S−2 for `batch` sequences whose first stage gave `first_output`:
  // each stage's input, the first stage's output first. g < 0: an evaluation's.
  std::vector<std::vector<float>> forward_through(std::vector<float> first_output, int batch,
                                                  std::int64_t g, RpcClient& client);

  const Config& config_;
  SwarmStage& stage_;
  StageRounds& rounds_;
  RpcServer& server_;
  SwarmProgress& progress_;
  const TrainingData& data_;
  MetricsWriter& metrics_;
  StageCheckpoints& checkpoints_;
  StageRouter router_;
  std::mutex mutex_;
  std::atomic<bool> stopping_{false};
  std::exception_ptr failure_;
  double round_loss_ = 0;  // Σ loss of this driver's micro-batches in the round
  int round_batches_ = 0;
  std::chrono::steady_clock::time_point round_start_;
};

}  // namespace strata
