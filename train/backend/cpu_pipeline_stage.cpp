#include "train/backend/cpu_pipeline_stage.h"

#include <algorithm>

#include "model/core/error.h"

namespace strata {

CpuPipelineStage::CpuPipelineStage(Gpt<float>& model)
    : model_(model),
      T_(model.sequence_rows()),
      batch_of_slot_(static_cast<std::size_t>(model.slots()), 0) {}

void CpuPipelineStage::bind(ParameterAccess<float>* parameters) { parameters_ = parameters; }

int CpuPipelineStage::slots() const { return model_.slots(); }

std::size_t CpuPipelineStage::boundary_size(int batch) const {
  return static_cast<std::size_t>(model_.activation_rows(batch, T_)) * model_.shape().d_model;
}

double CpuPipelineStage::forward(int slot, const std::int32_t* tokens, const float* input,
                                 const std::int32_t* targets, int batch) {
  STRATA_CHECK(parameters_ != nullptr, "pipeline stage: forward before bind() gave it weights");
  const double loss = model_.forward(slot, *parameters_, tokens, input, targets, batch, T_);
  batch_of_slot_.at(static_cast<std::size_t>(slot)) = batch;
  return loss;
}

void CpuPipelineStage::copy_output(int slot, float* out) {
  const int batch = batch_of_slot_.at(static_cast<std::size_t>(slot));
  std::copy_n(model_.output(slot), boundary_size(batch), out);
}

void CpuPipelineStage::backward(int slot, const float* output_grad, float loss_scale) {
  STRATA_CHECK(parameters_ != nullptr, "pipeline stage: backward before bind() gave it weights");
  model_.backward(slot, *parameters_, output_grad, loss_scale);
}

void CpuPipelineStage::backward_input(int slot, const float* output_grad, float loss_scale) {
  STRATA_CHECK(parameters_ != nullptr, "pipeline stage: backward before bind() gave it weights");
  model_.backward_input(slot, *parameters_, output_grad, loss_scale);
}

void CpuPipelineStage::backward_weight(int slot) {
  STRATA_CHECK(parameters_ != nullptr, "pipeline stage: backward before bind() gave it weights");
  model_.backward_weight(slot, *parameters_);
}

void CpuPipelineStage::copy_input_grad(int slot, float* input_grad) {
  const int batch = batch_of_slot_.at(static_cast<std::size_t>(slot));
  std::copy_n(model_.input_grad(slot), boundary_size(batch), input_grad);
}

void CpuPipelineStage::copy_losses(int slot, float* losses) {
  const int batch = batch_of_slot_.at(static_cast<std::size_t>(slot));
  std::copy_n(model_.losses(slot), static_cast<std::size_t>(batch) * T_, losses);
}

}  // namespace strata
