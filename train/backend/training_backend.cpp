#include "train/backend/training_backend.h"

#include "model/core/error.h"
#include "train/backend/cpu_training.h"
#include "train/backend/cuda_training.h"

namespace strata {

OptimizerGroups optimizer_groups(const ReductionPlan& plan, const ProcessGroups& groups) {
  OptimizerGroups og;
  if (plan.sharded) og.owners = groups.reductions().of(plan.shard_axis);
  if (groups.tp().size() > 1) og.tp = &groups.tp();
  return og;
}

std::unique_ptr<TrainingBackend> make_training_backend(Device device, const Config& config,
                                                       const GptShape& shape,
                                                       BackendPlacement placement) {
  STRATA_CHECK(placement.groups != nullptr && placement.program != nullptr,
               "a training backend needs its groups and its pipeline program");
  if (device == Device::cuda) {
    // As config validation says of device: cuda, for device: auto resolved to it.
    if (config.optimizer.name != OptimizerName::adamw &&
        config.optimizer.offload == OptimizerOffload::none)
      fail("optimizer.name: ", kOptimizerNameChoices.word(config.optimizer.name),
           " has no CUDA kernel: on device cuda it needs optimizer.offload host or disk");
    if (config.precision.fp8.scaling == Fp8Scaling::rowwise)
      fail(
          "precision.fp8: rowwise is not built on CUDA yet (tensorwise and delayed are): use "
          "device: cpu");
    const int gpu = place_on_gpu(placement, config, placement.groups->job().rank(),
                                 placement.groups->world(), placement.groups->mesh().pp_size());
    return make_cuda_training(config, shape, placement, gpu);
  }
  STRATA_CHECK(device == Device::cpu, "make_training_backend: device auto is not resolved");
  return std::make_unique<CpuTraining>(config, shape, placement);
}

}  // namespace strata
