// Where a rank's part of the training step computes (docs/ARCHITECTURE.md §2: one step, two
// backends). The step (train/training_step.h) asks a backend, in order, to accumulate the gradients
// of a step's micro-batches (through the pipeline executor on both backends), to run the reduction
// plan on them, for Σ g² over the plan's norm ranges, and to apply the optimizer to the range it
// owns; the trainer reads and writes the training state through it for checkpoints. Nothing above
// this interface asks which backend it is.
//
// Implementations: CpuTraining (train/backend/cpu_training.h: the CPU model, oneDNN or OpenBLAS
// GEMMs) and the CUDA one (train/backend/cuda_training.h: one GPU per rank).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/process_groups.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/pipeline/pipeline_executor.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/zero/sharded_parameters.h"
#include "plan/config.h"
#include "plan/memory_account.h"
#include "plan/placement.h"
#include "train/backend/master_weights.h"
#include "train/checkpoint/checkpoint.h"
#include "train/optimizer/optimizer.h"

namespace strata {

// Where this rank's part of the model sits in the run, and how its gradients are reduced.
struct BackendPlacement {
  ModelPartition partition;
  const ProcessGroups* groups = nullptr;     // tp, dp and pp groups (not owned)
  const PipelineProgram* program = nullptr;  // the step's schedule, one list per stage
  PipelineLayout layout;                     // where its chunks live (partition.chunks() per rank)
  // Per chunk: micro-batches it holds at once under that schedule (its activation slots).
  std::vector<int> slots{1};
  bool nonblocking_sends = false;  // the schedule's transfers need sends that queue
  ReductionPlan plan;              // make_reduction_plan for this partition and mesh position
  // CUDA: device arrays cross ranks over NCCL (every rank has a GPU of its own); otherwise they
  // are staged through host memory over the MPI groups.
  bool nccl = false;
};

class TrainingBackend : public MasterWeights {
 public:
  virtual ~TrainingBackend() = default;

  // "cpu", "cuda" or "cuda (nccl)" (with ", optimizer on the host" under optimizer.offload), for
  // the startup line.
  virtual std::string name() const = 0;
  virtual const ParameterLayout& layout() const = 0;
  virtual const ReductionPlan& plan() const = 0;

  // The training state this rank holds, as named buffers (train/checkpoint/checkpoint.h): "model"
  // (fp32 master weights, plan().buffer_size elements) and "optimizer/<state>" over plan().owned.
  // state() copies them out (checkpoints); set_state() copies in buffers of the same names and
  // ranges and refreshes the compute-dtype weights.
  virtual std::vector<StateBuffer> state() = 0;
  virtual void set_state(const std::vector<StateBuffer>& buffers) = 0;

  // DiLoCo's outer step reads and writes the fp32 master weights (MasterWeights).

  // Zeroes the gradients and runs micro-batches 0 … micro_batches−1 of `source` through the
  // pipeline schedule (gradients of loss_scale · mean loss each, accumulated). Returns the sum of
  // the micro-batch mean losses on the last stage, 0 on the others.
  virtual double accumulate_gradients(int micro_batches, float loss_scale,
                                      const MicroBatchSource& source) = 0;
  // SWARM (train/swarm/): micro-batches driven one at a time by the caller instead of a pipeline
  // schedule. zero_gradients() clears the gradients; stage() is the rank's one chunk, bound to the
  // current compute-dtype weights (ask again after apply_optimizer) and to the gradients, which
  // its backward passes add to.
  virtual void zero_gradients() = 0;
  virtual PipelineStage& stage() = 0;
  // The gradients over plan().gradient_range as host fp32, copied out and back (SWARM's
  // averaging among a stage's peers).
  virtual void copy_gradients(float* out) = 0;
  virtual void set_gradients(const float* in) = 0;
  // Runs plan().gradients over the placement's groups.
  virtual void reduce_gradients() = 0;
  // Σ g² over plan().norm_ranges of the gradients as they are (still loss-scaled), in double.
  virtual double gradient_sum_of_squares() = 0;
  // The optimizer on plan().owned, then plan().parameters, then the compute-dtype weights; and
  // the step's FP8 amaxes pushed into the delayed recipe's histories (model/fp8/fp8_state.h), so
  // that a step the non-finite check skips leaves them as they were.
  virtual void apply_optimizer(const OptimizerStep& step) = 0;

  // Forward passes with the current weights (evaluation): every stage of a replica runs it.
  virtual PipelineExecutor& evaluator() = 0;
  // The pipeline executor's time in accumulate_gradients (all of it, and in transfers); zero
  // where the step does not run through the executor (a lone CUDA stage's fused pass).
  virtual PipelineExecutor::Timing pipeline_timing() const = 0;

  virtual std::size_t activation_bytes() const = 0;
  virtual std::size_t activation_bytes_per_layer() const = 0;
  virtual MemoryAccount memory() const = 0;
  // Device memory reserved (0 on the CPU).
  virtual std::size_t device_bytes() const { return 0; }
  // The MoE blocks' routing figures since the last call (model/moe/moe_layer.h MoeTotals over
  // the model's n_layer blocks, this rank's at their index; empty without experts).
  virtual std::vector<double> take_moe_totals() { return {}; }
  // Waits for queued device work (timing); nothing on the CPU.
  virtual void synchronize() {}
};

// The groups an optimizer on `plan`'s owned range sums its statistics over (optimizer.h): the
// shard group when the range is a ZeRO shard, tp when it has more than one rank.
OptimizerGroups optimizer_groups(const ReductionPlan& plan, const ProcessGroups& groups);

// The backend of `device` (cpu or cuda, as resolve_device decides: train/backend/device_choice.cpp)
// for `config` and this rank's placement. On CUDA it also chooses, collectively over the ranks that
// train one model (groups->world()), the rank's GPU (by its rank in the job, groups->job()) and
// whether device arrays cross ranks over NCCL (place_on_gpu, train/backend/cuda_training.h), so no
// caller makes those choices.
std::unique_ptr<TrainingBackend> make_training_backend(Device device, const Config& config,
                                                       const GptShape& shape,
                                                       BackendPlacement placement);

}  // namespace strata
