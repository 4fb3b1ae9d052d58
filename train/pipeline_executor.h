// Runs one stage's pipeline program (parallel/pipeline_schedule.h) for one training step: the
// micro-batches of the step go forward and backward through this stage's part of the model, and
// activations and their gradients travel to the neighbouring stages over the pipeline group.
// Without pipeline parallelism the program is forward/backward per micro-batch, so this is also
// the single-stage training loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "model/gpt.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace strata {

// Fills tokens and targets (B, T) of micro-batch `mb` of the current step (every stage may ask:
// the first needs the tokens, the last the targets).
using MicroBatchSource = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;

class PipelineExecutor {
 public:
  // `model` is this stage's part; `pp` the pipeline group (rank = stage; size 1 without
  // pipelining). B, T: micro-batch shape. Not owned; must outlive the executor.
  PipelineExecutor(Gpt<float>& model, Communicator& pp, const PipelineProgram& program, int B,
                   int T);

  // One step's forwards and backwards; grads += gradients of loss_scale · Σ micro-batch losses.
  // Returns the sum of the micro-batch losses on the last stage, 0 elsewhere.
  double train_step(const float* params, float* grads, float loss_scale,
                    const MicroBatchSource& source);

  // Forward only, for evaluation: micro-batch mb of batch_sizes[mb] (<= B) sequences passes
  // through the stages; on the last stage on_losses(mb, per-position losses, count) is called for
  // each.
  void forward_only(const float* params, const std::vector<int>& batch_sizes,
                    const MicroBatchSource& source,
                    const std::function<void(int mb, const float* losses, int count)>& on_losses);

 private:
  int stage() const { return pp_.rank(); }
  bool first_stage() const { return pp_.rank() == 0; }
  bool last_stage() const { return pp_.rank() == pp_.size() - 1; }
  std::size_t activation_size(int batch) const;
  void run_forward(int mb, const float* params, const MicroBatchSource& source, int batch,
                   double* loss_sum);
  void run_backward(int mb, const float* params, float* grads, float loss_scale);
  std::vector<float>& buffer(std::map<int, std::vector<float>>& buffers, int mb, int batch);

  Gpt<float>& model_;
  Communicator& pp_;
  const std::vector<PipelineOp>& ops_;
  int B_, T_;
  std::vector<std::int32_t> tokens_, targets_;
  std::map<int, int> slot_of_;  // micro-batch -> activation slot
  std::vector<int> free_slots_;
  std::map<int, std::vector<float>> x_, y_, dy_, dx_;  // per micro-batch (schedule header)
};

}  // namespace strata
