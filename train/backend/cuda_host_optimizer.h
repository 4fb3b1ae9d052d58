// optimizer.offload host or disk on the CUDA backend (ZeRO-Offload; train/backend/cuda_training.h):
// the owned range's master weights and gradients cross to page-locked host buffers, the CPU
// backend's optimizer (any of train/optimizer/, its state in host memory or streamed from disk)
// updates them on the host's cores, and the weights cross back: 4 bytes per owned element each way
// plus the gradients' 4 down. The same optimizer object and arithmetic as device: cpu, so a run
// follows the CPU process's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "model/kernels/cuda/device_buffer.h"
#include "train/optimizer/optimizer.h"

namespace strata {

class HostOffloadedOptimizer {
 public:
  // `owned`: the elements it updates.
  HostOffloadedOptimizer(std::unique_ptr<Optimizer> optimizer, std::size_t owned);

  // master (owned elements, device) -= the update from grads (device), on the host. Waits for
  // `stream` once (the copies down); the copy back is queued on it. The host buffers are written
  // again only after the next update's wait, which follows that copy on the same stream.
  void update(float* master, const float* grads, const OptimizerStep& step, cudaStream_t stream);
  // Its state (save, shapes, load: checkpoints).
  Optimizer& optimizer() { return *optimizer_; }

 private:
  std::unique_ptr<Optimizer> optimizer_;
  cuda::PinnedBuffer<float> master_, grads_;  // page-locked staging of the owned range
};

}  // namespace strata
