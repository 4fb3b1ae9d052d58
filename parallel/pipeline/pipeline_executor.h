// Runs one stage's pipeline program (parallel/pipeline/pipeline_schedule.h) for one training step:
// the micro-batches of the step go forward and backward through this stage's part of the model (a
// PipelineStage, parallel/pipeline/pipeline_stage.h: any backend), and activations and their
// gradients travel to the neighbouring stages over the pipeline group as host fp32 arrays.
// Programs of one chunk per rank run, with the fused backward or with B and W apart (zb-h1: a
// micro-batch's slot stays taken from its forward to its W). Without pipeline parallelism the
// program is forward/backward per micro-batch, so this is also the single-stage training loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/pipeline/pipeline_stage.h"

namespace strata {

// Fills tokens and targets (B, T) of micro-batch `mb` of the current step (every stage may ask:
// the first needs the tokens, the last the targets).
using MicroBatchSource = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;

class PipelineExecutor {
 public:
  // `stage` is this stage's part of the model; `pp` the pipeline group (rank = stage; size 1
  // without pipelining). B, T: micro-batch shape (T the stage's sequence length). Not owned; must
  // outlive the executor. `nonblocking_sends`: transfers as pipeline_schedule.h's queued model
  // (sends return at once, each message tagged with its micro-batch and direction, and
  // completed at the end of the step), which the schedules written with single transfers need
  // (pipeline_schedule_needs_nonblocking_sends); otherwise sends wait for their receive.
  PipelineExecutor(PipelineStage& stage, Communicator& pp, const PipelineProgram& program, int B,
                   int T, bool nonblocking_sends = false);

  // One step's forwards and backwards with the stage's weights and gradient buffer (bound by the
  // caller); its grads += gradients of loss_scale · Σ micro-batch losses. Returns the sum of the
  // micro-batch losses on the last stage, 0 elsewhere.
  double train_step(float loss_scale, const MicroBatchSource& source);

  // Wall time of the train_step calls after the first (which warms up allocations and caches):
  // in all, and inside the pipeline's transfers, waiting for a neighbour included, which is this
  // stage's idle time within its program (its bubble and its messages).
  struct Timing {
    int steps = 0;
    double seconds = 0, transfer_seconds = 0;
  };
  const Timing& timing() const { return timing_; }

  // Forward only, for evaluation: micro-batch mb of batch_sizes[mb] (<= B) sequences passes
  // through the stages; on the last stage on_losses(mb, per-position losses, count) is called for
  // each.
  void forward_only(const std::vector<int>& batch_sizes, const MicroBatchSource& source,
                    const std::function<void(int mb, const float* losses, int count)>& on_losses);

 private:
  int stage() const { return pp_.rank(); }
  bool first_stage() const { return pp_.rank() == 0; }
  bool last_stage() const { return pp_.rank() == pp_.size() - 1; }
  void run_forward(int mb, const MicroBatchSource& source, int batch, double* loss_sum);
  // The fused backward, or with `input_only` its B (the slot stays taken until W).
  void run_backward(int mb, float loss_scale, bool input_only);
  void run_weight_backward(int mb);
  std::vector<float>& buffer(std::map<int, std::vector<float>>& buffers, int mb, int batch);
  // Sends buffers[mb] to `peer` and drops it from `buffers` (queued: kept in flight until the
  // step ends); receives into buffer(buffers, mb) from `peer`. `gradient`: which channel.
  void send(std::map<int, std::vector<float>>& buffers, int mb, int peer, bool gradient);
  void receive(std::map<int, std::vector<float>>& buffers, int mb, int peer, bool gradient);

  PipelineStage& stage_;
  Communicator& pp_;
  const std::vector<PipelineOp>& ops_;
  int B_, T_;
  std::vector<std::int32_t> tokens_, targets_;
  std::map<int, int> slot_of_;  // micro-batch -> activation slot
  std::vector<int> free_slots_;
  std::set<int> weight_pending_;                       // micro-batches through B, not yet through W
  std::map<int, std::vector<float>> x_, y_, dy_, dx_;  // per micro-batch (schedule header)
  std::vector<float> losses_;                          // last stage, forward_only: per position
  bool nonblocking_sends_;
  Timing timing_;
  int steps_run_ = 0;
  struct InFlight {  // a queued send and the buffer it reads until it completes
    std::vector<float> data;
    std::unique_ptr<PendingCollective> send;
  };
  std::vector<InFlight> in_flight_;
};

}  // namespace strata
