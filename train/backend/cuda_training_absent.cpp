// The CUDA backend in a build without it (STRATA_CUDA=OFF or no nvcc): no devices, no supported
// shapes, and asking for a device step is an error that says how to get one.
#include "model/core/error.h"
#include "train/backend/cuda_training.h"

namespace strata {

int cuda_device_count() { return 0; }

bool cuda_supports_shape(const GptShape&) { return false; }

std::string cuda_device_identity(int) { return ""; }

std::string cuda_device_name(int) { return ""; }

std::unique_ptr<TrainingBackend> make_cuda_training(const Config&, const GptShape&,
                                                    const BackendPlacement&, int) {
  fail(
      "device cuda: this build has no CUDA backend (configure with -DSTRATA_CUDA=ON where nvcc is "
      "installed)");
}

}  // namespace strata
