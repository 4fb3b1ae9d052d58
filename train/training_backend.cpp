#include "train/training_backend.h"

#include "model/core/error.h"
#include "model/kernels/cpu/precision.h"
#include "train/cpu_training.h"
#include "train/cuda_training.h"

namespace strata {

GptOptions gpt_options_of(const Config& config) {
  return GptOptions{cpu::compute_dtype_from_name(config.precision.compute),
                    recompute_from_name(config.recompute)};
}

std::unique_ptr<TrainingBackend> make_training_backend(const std::string& device,
                                                       const Config& config, const GptShape& shape,
                                                       const BackendPlacement& placement, int gpu) {
  STRATA_CHECK(placement.groups != nullptr && placement.program != nullptr,
               "a training backend needs its groups and its pipeline program");
  if (device == "cuda") return make_cuda_training(config, shape, placement, gpu);
  STRATA_CHECK(device == "cpu", "unknown device '", device, "'");
  return std::make_unique<CpuTraining>(config, shape, placement);
}

}  // namespace strata
