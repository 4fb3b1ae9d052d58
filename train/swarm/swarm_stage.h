// One stage of a swarm on this peer (docs/ARCHITECTURE.md §2 "SWARM"): the stage's part of the
// model, the passes micro-batches make through it, and its optimizer steps.
//
// The model is a one-rank backend (train/backend/training_backend.h) whose partition is the
// stage's layers of swarm.stages, with the embedding on the first stage and the head (lm_head:
// the model is untied) on the last. Every backward recomputes the stage's forward from the input
// it is given, so nothing is kept between passes and any peer of the stage can take any pass.
//
// A stage steps once its peers hold the gradients of swarm.target_batch samples
// (train/swarm/stage_rounds.h): each micro-batch's backward adds the gradient of
// (micro_batch / target_batch) · its mean loss, so a round's sum is the gradient of the round's
// mean loss, as a pipeline step of global_batch = target_batch sums its micro-batches. The step
// clips by the stage's own gradient norm (the stages step apart; no global norm exists) and
// follows the run's learning-rate schedule by the stage's step count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/process_groups.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"
#include "train/backend/training_backend.h"

namespace strata {

// The layers, embedding and head of stage `stage` of swarm.stages.
ModelPartition swarm_stage_partition(const Config& config, int stage);

// What one optimizer step of a stage did.
struct StageStep {
  std::int64_t step = 0;  // the stage's steps so far, this one included
  double lr = 0;
  double grad_norm = 0;  // of the round's gradient, before clipping
  bool applied = false;  // false: a non-finite gradient, skipped
  int held = 0;          // samples whose gradients this peer added to the round
  int samples = 0;       // samples the round averaged over, every member's
  int members = 1;       // peers that averaged it
  bool joined = false;   // this peer took the stage's state instead (a joiner)
  // Σ of the stage's fp32 weights after the step, in double: peers of a stage that hold the same
  // state bit for bit report the same sum (tests compare them).
  double weights_sum = 0;
};

// swarm.target_batch, or train.global_batch when it is 0.
int swarm_target_batch(const Config& config);

class SwarmStage {
 public:
  // `world`: this one-process job's communicator (outlives the stage).
  SwarmStage(const Config& config, int stage, Device device, MpiCommunicator& world);

  int index() const { return stage_; }
  int stages() const { return static_cast<int>(config_.swarm.stages.size()); }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages() - 1; }
  // Floats crossing a stage boundary for `batch` sequences: batch · T · C.
  std::size_t boundary_floats(int batch) const;
  TrainingBackend& backend() { return *backend_; }

  // Fresh weights of the run's seed: what every layout of the model starts from.
  void initialize();

  // The stage's output for a micro-batch of `batch` sequences: `tokens` on the first stage,
  // `input` (boundary_floats(batch)) on the others.
  std::vector<float> forward(const std::int32_t* tokens, const float* input, int batch);
  // Recomputes the forward, then, when `add`, adds the gradient of this micro-batch's share of
  // the round's loss given `output_grad` (else the gradients are left as they were: a duplicate);
  // returns the input's gradient (empty on the first stage).
  std::vector<float> backward(const std::int32_t* tokens, const float* input,
                              const float* output_grad, int batch, bool add);
  // Last stage: the loss of a micro-batch (Σ −log p over its B·T targets) and, when `input_grad`
  // is given, its backward (the input's gradient there; the weights' added when `add`).
  double loss(const float* input, const std::int32_t* targets, int batch,
              std::vector<float>* input_grad, bool add);

  // Applies the gradients held now times `scale` (a round averaged over fewer samples than its
  // target is scaled up to their mean), skipped when non-finite; clears them.
  StageStep step(double scale);
  std::int64_t steps_done() const { return steps_done_; }
  std::int64_t optimizer_steps() const { return optimizer_steps_; }
  // Σ of the weights this peer holds, in double (StageStep::weights_sum).
  double weights_sum();
  // A joiner takes the stage's counts with its state.
  void set_counts(std::int64_t steps_done, std::int64_t optimizer_steps) {
    steps_done_ = steps_done;
    optimizer_steps_ = optimizer_steps;
  }

 private:
  const Config& config_;
  int stage_;
  float loss_scale_;  // micro_batch / target_batch
  ProcessGroups groups_;
  PipelineProgram program_;
  ModelPartition partition_;
  std::unique_ptr<TrainingBackend> backend_;
  std::int64_t steps_done_ = 0;
  std::int64_t optimizer_steps_ = 0;  // applied ones: the optimizer's bias-correction count
  std::vector<float> kept_;           // the gradients across a duplicate's backward
};

}  // namespace strata
