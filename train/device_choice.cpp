// resolve_device (train/cuda_training.h): where a run trains.
#include "model/core/error.h"
#include "train/cuda_training.h"

namespace strata {

std::string resolve_device(const Config& config, int tp, int pp) {
  const bool layout_runs_on_cuda = tp == 1 && pp == 1;
  if (config.device == "cpu") return "cpu";
  if (config.device == "cuda") {
    if (!layout_runs_on_cuda)
      fail("device cuda: tensor and pipeline parallelism (tp ", tp, ", pp ", pp,
           ") run on the CPU backend only so far; use device cpu, or tp 1 and pp 1");
    if (cuda_device_count() == 0)
      fail("device cuda: no usable CUDA device (or this build has no CUDA backend)");
    return "cuda";
  }
  return layout_runs_on_cuda && cuda_device_count() > 0 ? "cuda" : "cpu";  // auto
}

}  // namespace strata
