// resolve_device, choose_nccl and place_on_gpu (train/backend/cuda_training.h): where a run trains,
// on which GPU, and what carries its device arrays between ranks.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "model/core/error.h"
#include "train/backend/cuda_training.h"

namespace strata {

Device resolve_device(const Config& config, const GptShape& shape) {
  if (config.device == Device::cpu) return Device::cpu;
  const bool usable = cuda_device_count() > 0;
  if (config.device == Device::cuda) {
    if (!usable) fail("device cuda: no usable CUDA device (or this build has no CUDA backend)");
    if (!cuda_supports_shape(shape))
      fail("device cuda: head size ", shape.head_size(),
           " (d_model / n_head) has no attention kernel (a multiple of 16 up to 128); use device"
           " cpu");
    return Device::cuda;
  }
  if (usable && cuda_supports_shape(shape)) return Device::cuda;
  if (config.parallel.device_comm == DeviceComm::nccl)
    fail("parallel.device_comm nccl: device auto trains on the CPU here (",
         !usable ? std::string("no usable CUDA device")
                 : "head size " + std::to_string(shape.head_size()) + " has no attention kernel",
         ") and NCCL carries device arrays only; use parallel.device_comm auto or host");
  return Device::cpu;
}

bool choose_nccl(DeviceComm device_comm, const std::vector<std::string>& gpu_ids) {
  if (device_comm == DeviceComm::host) return false;
  // NCCL refuses a communicator with two ranks on one GPU: find the first such pair.
  std::map<std::string, std::size_t> first_rank_on;
  for (std::size_t r = 0; r < gpu_ids.size(); ++r) {
    const auto [it, fresh] = first_rank_on.emplace(gpu_ids[r], r);
    if (fresh) continue;
    if (device_comm == DeviceComm::automatic) return false;
    fail("parallel.device_comm nccl: world ranks ", it->second, " and ", r,
         " compute on the same GPU, and NCCL needs one GPU per rank; use parallel.device_comm "
         "host (or auto), or one rank per GPU");
  }
  // One rank has nothing to exchange: auto leaves NCCL out; nccl asked for it.
  return device_comm == DeviceComm::nccl || gpu_ids.size() > 1;
}

int place_on_gpu(BackendPlacement& placement, const Config& config, int world_rank,
                 Communicator& team, int pp_size) {
  const int gpu = world_rank % config.parallel.gpus_per_node % cuda_device_count();
  // Collective: every rank learns which GPU each rank computes on.
  placement.nccl =
      choose_nccl(config.parallel.device_comm, gather_gpu_ids(team, cuda_device_identity(gpu)));
  // ZeRO++ on CUDA runs through the host (train/backend/cuda_staged_sharding.h).
  const auto& zero = config.parallel.zero;
  if (placement.plan.gradients_by_segment &&
      (zero.quantized_weights || zero.hierarchical_partition || zero.quantized_gradients)) {
    if (config.parallel.device_comm == DeviceComm::nccl)
      fail(
          "parallel.device_comm: nccl does not carry the ZeRO++ switches yet (they run "
          "through the host); use auto or host");
    placement.nccl = false;
  }
  if (pp_size == 1) placement.slots = {1};
  return gpu;
}

std::vector<std::string> gather_gpu_ids(Communicator& world, const std::string& mine) {
  // The identities travel as bytes, padded with zeros to a common length (an identity is text,
  // so its first zero byte ends it).
  constexpr std::size_t kLength = 64;
  STRATA_CHECK(mine.size() <= kLength, "GPU identity longer than ", kLength, " characters");
  std::vector<std::uint8_t> local(kLength, 0);
  std::copy(mine.begin(), mine.end(), local.begin());
  const std::size_t n = static_cast<std::size_t>(world.size());
  std::vector<std::uint8_t> all(n * kLength);
  world.all_gather(local.data(), all.data(), kLength);
  std::vector<std::string> ids(n);
  for (std::size_t r = 0; r < n; ++r) {
    const std::uint8_t* begin = all.data() + r * kLength;
    ids[r].assign(begin, std::find(begin, begin + kLength, std::uint8_t{0}));
  }
  return ids;
}

}  // namespace strata
