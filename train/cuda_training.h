// The training step on a CUDA device (`device: cuda`, or `auto` where a device is usable): one
// GPU per rank holds the fp32 master weights, the AdamW moments, the fp32 gradients and the
// compute-dtype weights copy, and runs every micro-batch's forward and backward (model/gpt_cuda.h),
// the gradient norm and the fused AdamW update there. The host sees only the tokens going in and
// the numbers it logs: the loss sum and the gradient norm, read once per step (the skip decision
// for non-finite steps needs the norm). Data parallelism sums the gradients over the data-parallel
// group through host memory (the MPI communicator; NCCL is not used yet).
//
// Scope: the whole model per rank (tp = pp = 1); tensor and pipeline parallelism run on the CPU
// backend only so far, and the trainer refuses `device: cuda` with them.
//
// Builds without CUDA link a stand-in whose factory reports that the build has no CUDA backend.
//
// Status: compiled for sm_90a, never run on a GPU (untested).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/pipeline_executor.h"

namespace strata {

class Communicator;

class CudaTraining {
 public:
  virtual ~CudaTraining() = default;

  // Copies the fp32 master weights and AdamW moments (layout order of ParameterLayout::for_gpt)
  // to the device and makes the compute-dtype copy; `adam_steps` updates were taken before.
  virtual void load(const std::vector<float>& params, const std::vector<float>& adam_m,
                    const std::vector<float>& adam_v) = 0;
  // Copies them back (checkpoints); waits for the device.
  virtual void store(std::vector<float>& params, std::vector<float>& adam_m,
                     std::vector<float>& adam_v) = 0;

  // One step's gradients: zeroes them, runs micro-batches 0 … micro_batches−1 of `source`
  // (gradients of loss_scale · mean loss each, accumulated), then sums them over `dp` (null: no
  // data parallelism). Returns the sum of the micro-batch mean losses on this rank.
  virtual double accumulate_gradients(int micro_batches, float loss_scale,
                                      const MicroBatchSource& source, Communicator* dp) = 0;
  // ‖g‖₂ of the gradients as they are (still loss-scaled), in double.
  virtual double gradient_norm() = 0;
  // AdamW step number `step` (1-based, for bias correction) with learning rate lr; the gradients
  // are multiplied by grad_scale first (clipping and loss-scale removal).
  virtual void update(double lr, double grad_scale, int step) = 0;

  // Sum of the per-position losses of `batch` sequences (B, T) — evaluation.
  virtual double forward_loss_sum(const std::int32_t* inputs, const std::int32_t* targets,
                                  int batch) = 0;

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

// The device step for `config` (whole model, micro-batches of train.micro_batch sequences) on
// device `device`. Error when the build has no CUDA backend.
std::unique_ptr<CudaTraining> make_cuda_training(const Config& config, const GptShape& shape,
                                                 int device);

// Decides where a run trains: "cpu" or "cuda", from `device` (cpu | cuda | auto), the layout and
// the devices present. auto picks cuda when a device is usable and the layout is one the CUDA
// backend runs (tp = pp = 1); cuda with another layout, or without a device, is an error.
std::string resolve_device(const Config& config, int tp, int pp);

}  // namespace strata
