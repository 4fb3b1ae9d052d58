// The training step on a CUDA device (`device: cuda`, or `auto` where a device is usable): one
// GPU per rank holds this rank's part of the model (its ModelPartition, as the CPU model), the fp32
// master weights, the AdamW moments, the fp32 gradients and the compute-dtype weights copy, and
// runs every micro-batch's forward and backward (model/gpt_cuda.h), the gradient norm and the
// fused AdamW update there. The host sees the tokens going in, the numbers it logs (the loss sum
// and the gradient norm, read once per step: the skip decision for non-finite steps needs the
// norm) and what crosses ranks.
//
// Every layout of the CPU backend runs here too. Tensor parallelism runs inside the model;
// pipeline parallelism runs the stage through the trainer's PipelineExecutor, boundary
// activations crossing the host as fp32; the gradient sums across ranks (data parallelism,
// replicated parameters under sequence parallelism, the tied embedding of the two pipeline ends)
// follow the CPU backend's plan (train/gradient_sync.h). What carries the tensor-parallel
// collectives and the gradient sums is parallel.device_comm: NCCL, GPU to GPU and asynchronous,
// when every rank has a GPU of its own; else staging through host memory over MPI, which lets
// several ranks share one GPU at the cost of a host synchronisation per collective.
//
// Builds without CUDA link a stand-in whose factory reports that the build has no CUDA backend.
//
// Status: compiled for sm_90a, never run on a GPU (untested); the NCCL path never ran either (it
// needs a GPU per rank).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/core/collectives.h"
#include "model/gpt.h"
#include "model/parameter_layout.h"
#include "parallel/pipeline_schedule.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/gradient_sync.h"
#include "train/pipeline_executor.h"

namespace strata {

class Communicator;

class CudaTraining {
 public:
  virtual ~CudaTraining() = default;

  // Copies the fp32 master weights and AdamW moments (in the layout of this rank's partition,
  // ParameterLayout::for_partition) to the device and makes the compute-dtype copy.
  virtual void load(const std::vector<float>& params, const std::vector<float>& adam_m,
                    const std::vector<float>& adam_v) = 0;
  // Copies them back (checkpoints); waits for the device.
  virtual void store(std::vector<float>& params, std::vector<float>& adam_m,
                     std::vector<float>& adam_v) = 0;

  // One step's gradients on this rank: zeroes them and runs micro-batches 0 … micro_batches−1 of
  // `source` (gradients of loss_scale · mean loss each, accumulated), through the pipeline
  // schedule when there are several stages. Returns the sum of the micro-batch mean losses on the
  // last stage, 0 on the others.
  virtual double accumulate_gradients(int micro_batches, float loss_scale,
                                      const MicroBatchSource& source) = 0;
  // Sums the gradients across ranks as `plan` says (train/gradient_sync.h): on the device over
  // NCCL when the placement has NCCL groups, else through host memory with the CPU backend's own
  // code over `groups`. Either way every rank then holds what it would on the CPU.
  virtual void synchronize_gradients(const GradientSyncPlan& plan, const ProcessGroups& groups) = 0;
  // Σ g² over the [first, first + count) ranges of the gradients as they are (still loss-scaled),
  // in double; and ‖g‖₂ of all of them.
  virtual double sum_of_squares(const std::vector<std::pair<std::size_t, std::size_t>>& ranges) = 0;
  virtual double gradient_norm() = 0;
  // AdamW step number `step` (1-based, for bias correction) with learning rate lr; the gradients
  // are multiplied by grad_scale first (clipping and loss-scale removal).
  virtual void update(double lr, double grad_scale, int step) = 0;

  // Evaluation runs through this (every stage of a replica; the losses arrive on the last).
  // Error when the step was made without a pipeline group (CudaPlacement::pp).
  virtual PipelineExecutor& executor() = 0;

  // Waits for the work queued so far (the update is asynchronous); for timing.
  virtual void synchronize() = 0;
  // The device's name as the driver reports it ("NVIDIA H100 80GB HBM3").
  virtual std::string device_name() const = 0;

  virtual std::size_t activation_bytes() const = 0;
  virtual std::size_t activation_bytes_per_layer() const = 0;
  // Device memory this process reserved: the model's activation and scratch arenas, the weights,
  // gradients and moments, the cuBLASLt workspace (not the CUDA context's own), bytes. Fixed at
  // construction: no allocation happens during training.
  virtual std::size_t device_bytes() const = 0;
};

// CUDA devices usable by this process (0 without a driver, a device, or a CUDA build).
int cuda_device_count();

// Where this rank's part of the model sits in the run.
struct CudaPlacement {
  ModelPartition partition;
  Collectives* tp = nullptr;   // its tensor-parallel group (may be null when tp_size is 1)
  Communicator* pp = nullptr;  // its pipeline group (may be null without pipelining)
  const PipelineProgram* program = nullptr;  // the step's schedule, one list per stage
  int slots = 1;  // micro-batches this stage holds at once under that schedule
  // Set: device arrays cross ranks over NCCL, one communicator per axis made from these groups
  // (every rank of the world must then have a GPU of its own: choose_nccl); null: through host
  // memory over `tp`, `pp` and the trainer's groups.
  const ProcessGroups* nccl_groups = nullptr;
};

// The device step for `config` (micro-batches of train.micro_batch sequences) on device
// `device`: the whole model, or the part `placement` says. Error when the build has no CUDA
// backend.
std::unique_ptr<CudaTraining> make_cuda_training(const Config& config, const GptShape& shape,
                                                 int device);
std::unique_ptr<CudaTraining> make_cuda_training(const Config& config, const GptShape& shape,
                                                 const CudaPlacement& placement, int device);

// Whether the CUDA backend has kernels for `shape` (its attention kernel takes head sizes 16,
// 32, 64 and 128); false in a build without CUDA.
bool cuda_supports_shape(const GptShape& shape);

// This process's GPU `device` as a string that differs between any two physical GPUs (its UUID);
// empty in a build without CUDA.
std::string cuda_device_identity(int device);

// Every world rank's GPU identity (cuda_device_identity), in rank order; collective over `world`.
std::vector<std::string> gather_gpu_ids(Communicator& world, const std::string& mine);

// Whether a CUDA run's device arrays cross ranks over NCCL, from parallel.device_comm and every
// world rank's GPU identity: host never; nccl always, an error naming two ranks that share a GPU
// (NCCL needs one GPU per rank); auto when there are several ranks and no two share a GPU.
bool choose_nccl(const std::string& device_comm, const std::vector<std::string>& gpu_ids);

// Decides where a run trains: "cpu" or "cuda", from `device` (cpu | cuda | auto), the shape and
// the devices present. auto picks cuda when a device is usable and the backend supports the shape;
// cuda without a device, or with a shape it does not support, is an error, and so is auto
// falling back to the CPU when parallel.device_comm asks for NCCL.
std::string resolve_device(const Config& config, const GptShape& shape);

}  // namespace strata
