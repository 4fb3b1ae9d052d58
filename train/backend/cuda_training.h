// The training backend on a CUDA device (train/backend/training_backend.h; `device: cuda`, or
// `auto` where a device is usable): one GPU per rank holds this rank's part of the model (its
// ModelPartition, as the CPU model), the fp32 master weights and gradients over the reduction
// plan's buffer, the AdamW moments of the plan's owned range and the compute-dtype weights copy,
// and runs every micro-batch's forward and backward (model/gpt_cuda.h), the sum of squares and
// the fused AdamW update (model/kernels/cuda/adamw.h, whose element arithmetic the CPU optimizer
// shares) there. The host sees the tokens going in, the numbers it logs (the loss sum and the sum
// of squares, read once per step: the skip decision for non-finite steps needs the norm) and what
// crosses ranks.
//
// optimizer.offload host or disk moves the update to the host (ZeRO-Offload): the device keeps
// no optimizer state, the owned range's weights and gradients cross to page-locked host memory,
// the CPU backend's optimizer (any optimizer.name) updates them there and the weights cross back
// (docs/ARCHITECTURE.md, optimizer offload).
//
// Every layout of the CPU backend runs here too, expert parallelism included (parallel.ep > 1: each
// rank holds E/ep experts of its MoE blocks and exchanges their rows with its ep group through the
// host; the reductions over ep and expert_dp, and ZeRO's sums over ep, run as on the CPU). MoE
// blocks split their experts over tp like the MLP, and their routing figures reach the metrics
// through take_moe_totals. Tensor parallelism runs inside the model; pipeline parallelism runs the
// stage through the PipelineExecutor, boundary activations crossing the host as fp32; a lone stage
// trains in the model's fused forward-backward pass. The reduction plan runs on the device over
// NCCL (BackendPlacement::nccl: GPU to GPU and asynchronous, every rank having a GPU of its own),
// or through host memory with the CPU backend's own code over MPI, which lets several ranks share
// one GPU at the cost of a host synchronisation per step.
//
// Builds without CUDA link a stand-in whose factory reports that the build has no CUDA backend.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plan/config.h"
#include "train/backend/training_backend.h"

namespace strata {

class Communicator;

// The backend on GPU `device` for `config` (micro-batches of train.micro_batch sequences) and
// this rank's placement. Error when the build has no CUDA backend or the device is absent.
std::unique_ptr<TrainingBackend> make_cuda_training(const Config& config, const GptShape& shape,
                                                    const BackendPlacement& placement, int device);

// The name of GPU `device` as the driver reports it ("NVIDIA H100 80GB HBM3"); "" without CUDA.
std::string cuda_device_name(int device);

// CUDA devices usable by this process (0 without a driver, a device, or a CUDA build).
int cuda_device_count();

// Whether the CUDA backend has kernels for `shape` (its attention kernel takes head sizes 16,
// 32, 64 and 128); false in a build without CUDA.
bool cuda_supports_shape(const GptShape& shape);

// This process's GPU `device` as a string that differs between any two physical GPUs (its UUID);
// empty in a build without CUDA.
std::string cuda_device_identity(int device);

// Every world rank's GPU identity (cuda_device_identity), in rank order; collective over `world`.
std::vector<std::string> gather_gpu_ids(Communicator& world, const std::string& mine);

// Whether a CUDA run's device arrays cross ranks over NCCL, from parallel.device_comm and every
// world rank's GPU identity: host never; nccl always, an error naming two ranks that share a GPU
// (NCCL needs one GPU per rank); auto when there are several ranks and no two share a GPU.
bool choose_nccl(DeviceComm device_comm, const std::vector<std::string>& gpu_ids);

// The CUDA placement of this rank, which trains on CUDA: returns its GPU (the ranks of a node take
// its devices in turn, parallel.gpus_per_node per node) and sets placement.nccl (choose_nccl on
// every rank's GPU; false where the ZeRO++ switches run through the host, an error if
// parallel.device_comm asked for nccl there) and placement.slots (1 for a lone pipeline stage,
// which trains one micro-batch at a time whatever the schedule). Collective over `team`.
int place_on_gpu(BackendPlacement& placement, const Config& config, int world_rank,
                 Communicator& team, int pp_size);

// Decides where a run trains: Device::cpu or Device::cuda, from `device` (cpu | cuda | auto), the
// shape and the devices present. auto picks cuda when a device is usable and the backend supports
// the shape (expert parallelism included); cuda without a device, or with a shape it does not
// support, is an error, and so is auto falling back to the CPU when parallel.device_comm asks for
// NCCL.
Device resolve_device(const Config& config, const GptShape& shape);

}  // namespace strata
