// A pipeline stage (parallel/pipeline/pipeline_stage.h) computed by the CUDA model
// (model/gpt_cuda.h): the executor's host fp32 boundary arrays are converted to and from the
// model's compute dtype on the device (exact from bf16/fp16 to fp32; rounded once the other way,
// where the CPU backend rounds the same activation). Each transfer waits for the device: the
// pipeline's messages leave from the host. The model reaches its device weights and gradients
// through a ParameterAccess bound once (flat buffers, or ZeRO's segments).
//
// Built only with the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/gpt_cuda.h"
#include "model/kernels/cuda/host_staging.h"
#include "parallel/pipeline/pipeline_stage.h"

namespace strata {

template <class T>
class CudaPipelineStage final : public PipelineStage {
 public:
  // `model` is this stage's part; `parameters` hands it its device weights (T) and gradients
  // (fp32). Neither owned; both must outlive the stage.
  CudaPipelineStage(cuda::CudaGpt<T>& model, ParameterAccess<T, float>& parameters);

  int slots() const override { return model_.slots(); }
  std::size_t boundary_size(int batch) const override;
  double forward(int slot, const std::int32_t* tokens, const float* input,
                 const std::int32_t* targets, int batch) override;
  void copy_output(int slot, float* out) override;
  void backward(int slot, const float* output_grad, float loss_scale) override;
  // The model must be built with split_backward (otherwise backward_input refuses).
  void backward_input(int slot, const float* output_grad, float loss_scale) override;
  void backward_weight(int slot) override;
  void copy_input_grad(int slot, float* input_grad) override;
  void copy_losses(int slot, float* losses) override;

 private:
  cuda::CudaGpt<T>& model_;
  ParameterAccess<T, float>& parameters_;
  // The gradient of the stage output to the device, before a backward of `slot` (not the last
  // stage).
  void upload_output_grad(int slot, const float* output_grad);

  int T_;
  cuda::HostStaging staging_;  // boundary arrays ↔ the executor's host fp32 arrays
  std::vector<int> batch_of_slot_;
};

extern template class CudaPipelineStage<float>;
extern template class CudaPipelineStage<__nv_bfloat16>;
extern template class CudaPipelineStage<__half>;

}  // namespace strata
