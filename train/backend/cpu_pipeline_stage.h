// A pipeline stage (parallel/pipeline/pipeline_stage.h) computed by the CPU model, Gpt<float>: the
// boundary arrays are the model's own fp32 activations, copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/gpt.h"
#include "parallel/pipeline/pipeline_stage.h"

namespace strata {

// A stage computed by the CPU model. T is the model's seq_len.
class CpuPipelineStage final : public PipelineStage {
 public:
  // `model` is this stage's part (not owned; must outlive the stage).
  explicit CpuPipelineStage(Gpt<float>& model);

  // Where the following calls reach the weights (already rounded to the compute dtype) and add
  // the gradients (none needed when only forwards run). Not owned.
  void bind(ParameterAccess<float>* parameters);

  int slots() const override;
  std::size_t boundary_size(int batch) const override;
  double forward(int slot, const std::int32_t* tokens, const float* input,
                 const std::int32_t* targets, int batch) override;
  void copy_output(int slot, float* out) override;
  void backward(int slot, const float* output_grad, float loss_scale) override;
  void backward_input(int slot, const float* output_grad, float loss_scale) override;
  void backward_weight(int slot) override;
  void copy_input_grad(int slot, float* input_grad) override;
  void copy_losses(int slot, float* losses) override;

 private:
  Gpt<float>& model_;
  int T_;
  ParameterAccess<float>* parameters_ = nullptr;
  std::vector<int> batch_of_slot_;  // sequences of the micro-batch each slot holds
};

}  // namespace strata
