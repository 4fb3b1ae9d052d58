// CudaTraining in a build without the CUDA backend (STRATA_CUDA=OFF or no nvcc): no devices, and
// asking for one is an error that says how to get it.
#include "model/core/error.h"
#include "train/cuda_training.h"

namespace strata {

int cuda_device_count() { return 0; }

std::unique_ptr<CudaTraining> make_cuda_training(const Config&, const GptShape&, int) {
  fail(
      "device cuda: this build has no CUDA backend (configure with -DSTRATA_CUDA=ON where nvcc is "
      "installed)");
}

}  // namespace strata
