// HostOffloadedOptimizer (train/backend/cuda_host_optimizer.h).
#include "train/backend/cuda_host_optimizer.h"

#include <utility>

#include "model/kernels/cuda/check.h"

namespace strata {

HostOffloadedOptimizer::HostOffloadedOptimizer(std::unique_ptr<Optimizer> optimizer,
                                               std::size_t owned)
    : optimizer_(std::move(optimizer)), master_(owned), grads_(owned) {}

void HostOffloadedOptimizer::update(float* master, const float* grads, const OptimizerStep& step,
                                    cudaStream_t stream) {
  const std::size_t count = master_.size();
  if (count == 0) return;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(master_.data(), master, count * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(
      cudaMemcpyAsync(grads_.data(), grads, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  optimizer_->update(master_.data(), grads_.data(), step);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(master, master_.data(), count * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
}

}  // namespace strata
