// resolve_device (train/cuda_training.h): where a run trains.
#include "model/core/error.h"
#include "train/cuda_training.h"

namespace strata {

std::string resolve_device(const Config& config, const GptShape& shape) {
  if (config.device == "cpu") return "cpu";
  const bool usable = cuda_device_count() > 0;
  if (config.device == "cuda") {
    if (!usable) fail("device cuda: no usable CUDA device (or this build has no CUDA backend)");
    if (!cuda_supports_shape(shape))
      fail("device cuda: head size ", shape.head_size(),
           " (d_model / n_head) has no attention kernel (16, 32, 64 or 128); use device cpu");
    return "cuda";
  }
  return usable && cuda_supports_shape(shape) ? "cuda" : "cpu";  // auto
}

}  // namespace strata
