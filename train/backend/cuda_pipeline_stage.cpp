#include "train/backend/cuda_pipeline_stage.h"

#include <cuda_runtime_api.h>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"

namespace strata {

namespace {
std::size_t boundary_floats(const GptShape& shape, int rows) {
  return static_cast<std::size_t>(rows) * shape.d_model;
}
}  // namespace

template <class T>
CudaPipelineStage<T>::CudaPipelineStage(cuda::CudaGpt<T>& model,
                                        ParameterAccess<T, float>& parameters)
    : model_(model),
      parameters_(parameters),
      T_(model.sequence_rows()),
      staging_(boundary_floats(model.shape(), model.activation_rows(model.max_batch(), T_))),
      batch_of_slot_(static_cast<std::size_t>(model.slots()), 0) {}

template <class T>
std::size_t CudaPipelineStage<T>::boundary_size(int batch) const {
  return boundary_floats(model_.shape(), model_.activation_rows(batch, T_));
}

template <class T>
double CudaPipelineStage<T>::forward(int slot, const std::int32_t* tokens, const float* input,
                                     const std::int32_t* targets, int batch) {
  STRATA_CHECK(slot >= 0 && slot < slots());
  batch_of_slot_[static_cast<std::size_t>(slot)] = batch;
  const ModelPartition& p = model_.partition();
  if (!p.has_embedding) {
    STRATA_CHECK(input != nullptr, "a stage after the first needs its input");
    // From pageable memory: the executor may reuse `input` once this returns.
    staging_.to_device(model_.stage_input(slot), input, boundary_size(batch),
                       model_.context().stream());
  }
  model_.forward(slot, parameters_, tokens, targets, batch, T_);
  if (!p.has_head || targets == nullptr) return 0;
  return model_.loss_sum(slot) / (static_cast<double>(batch) * T_);
}

template <class T>
void CudaPipelineStage<T>::copy_output(int slot, float* out) {
  staging_.to_host(out, model_.stage_output(slot),
                   boundary_size(batch_of_slot_[static_cast<std::size_t>(slot)]),
                   model_.context().stream());
}

template <class T>
void CudaPipelineStage<T>::upload_output_grad(int slot, const float* output_grad) {
  STRATA_CHECK(slot >= 0 && slot < slots());
  if (model_.partition().has_head) return;
  STRATA_CHECK(output_grad != nullptr, "a stage before the last needs its output gradient");
  staging_.to_device(model_.stage_output_grad(), output_grad,
                     boundary_size(batch_of_slot_[static_cast<std::size_t>(slot)]),
                     model_.context().stream());
}

template <class T>
void CudaPipelineStage<T>::backward(int slot, const float* output_grad, float loss_scale) {
  upload_output_grad(slot, output_grad);
  model_.backward(slot, parameters_, loss_scale);
}

template <class T>
void CudaPipelineStage<T>::backward_input(int slot, const float* output_grad, float loss_scale) {
  upload_output_grad(slot, output_grad);
  model_.backward_input(slot, parameters_, loss_scale);
}

template <class T>
void CudaPipelineStage<T>::backward_weight(int slot) {
  STRATA_CHECK(slot >= 0 && slot < slots());
  model_.backward_weight(slot, parameters_);
}

template <class T>
void CudaPipelineStage<T>::copy_input_grad(int slot, float* input_grad) {
  staging_.to_host(input_grad, model_.stage_input_grad(),
                   boundary_size(batch_of_slot_[static_cast<std::size_t>(slot)]),
                   model_.context().stream());
}

template <class T>
void CudaPipelineStage<T>::copy_losses(int slot, float* losses) {
  const float* device = model_.losses(slot);
  STRATA_CHECK(device != nullptr, "losses of slot ", slot, " before a forward with targets");
  const std::size_t count =
      static_cast<std::size_t>(batch_of_slot_[static_cast<std::size_t>(slot)]) * T_;
  cudaStream_t stream = model_.context().stream();
  STRATA_CUDA_CHECK(
      cudaMemcpyAsync(losses, device, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template class CudaPipelineStage<float>;
template class CudaPipelineStage<__nv_bfloat16>;
template class CudaPipelineStage<__half>;

}  // namespace strata
