// One pipeline stage's part of the model as the pipeline executor
// (parallel/pipeline/pipeline_executor.h) sees it: micro-batches go forward into activation slots
// and backward out of them, and what crosses the stage boundary (activations forward, their
// gradients backward) is copied in and out as host fp32 arrays. The executor owns the schedule and
// the transfers; a backend (the CPU model here, a CUDA model elsewhere) owns the compute, the
// weights and the gradients.
//
// Backends: CpuPipelineStage (train/backend/cpu_pipeline_stage.h), CudaPipelineStage
// (train/backend/cuda_pipeline_stage.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

// What the pipeline executor needs of one stage's part of the model. Boundary activations and
// their gradients travel between stages as host fp32 arrays of boundary_size(batch) floats.
// Every micro-batch has the stage's sequence length T.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;

  // Micro-batches held at once: slots 0 … slots()−1, each from its forward until its backward.
  virtual int slots() const = 0;
  // Floats crossing the boundary for `batch` sequences: activation_rows(batch, T) · C.
  virtual std::size_t boundary_size(int batch) const = 0;

  // Forward of one micro-batch of `batch` sequences into `slot`. The first stage reads `tokens`
  // (batch, T), the others `input` (boundary_size(batch)), the previous stage's output; the last
  // stage reads `targets` (batch, T; null: no loss). Returns the mean loss on the last stage when
  // it had targets, else 0.
  virtual double forward(int slot, const std::int32_t* tokens, const float* input,
                         const std::int32_t* targets, int batch) = 0;
  // This stage's output of the micro-batch in `slot` (boundary_size(batch) floats); not on the
  // last stage.
  virtual void copy_output(int slot, float* out) = 0;
  // Backward of the micro-batch in `slot`: grads += gradients of loss_scale · mean loss.
  // `output_grad` (boundary_size(batch)) is the gradient of this stage's output, ignored on the
  // last stage, where the loss starts the pass.
  virtual void backward(int slot, const float* output_grad, float loss_scale) = 0;
  // The backward split in two, for schedules that run B and W apart (zero bubble): backward_input
  // computes the gradient of the stage's input only (copy_input_grad reads it afterwards) and
  // keeps the slot; backward_weight adds the parameter gradients and frees the slot. Together
  // they add exactly what backward adds. A stage whose model cannot split refuses (an Error).
  virtual void backward_input(int slot, const float* output_grad, float loss_scale) = 0;
  virtual void backward_weight(int slot) = 0;
  // After backward (or backward_input): the gradient of this stage's input (boundary_size(batch)
  // floats), for the previous stage; not on the first stage.
  virtual void copy_input_grad(int slot, float* input_grad) = 0;
  // Last stage, after a forward with targets: the per-position losses, batch · T floats.
  virtual void copy_losses(int slot, float* losses) = 0;
};

}  // namespace strata
