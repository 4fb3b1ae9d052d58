// The CUDA backend's NCCL communicators (train/backend/cuda_training.h): one per parallel axis,
// and the transport that runs the reduction plan's operations over them on device arrays.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "model/core/error.h"
#include "model/kernels/cuda/accumulate.h"
#include "model/kernels/cuda/check.h"
#include "parallel/comm/nccl_communicator.h"
#include "parallel/mesh/process_groups.h"
#include "parallel/mesh/reduction_plan.h"
#include "train/backend/training_backend.h"

namespace strata {

// One NCCL communicator per parallel axis, made (in this order on every rank) from the MPI groups
// of the placement; all null when the placement stages through the host. Under expert
// parallelism also ep and expert_dp (the ranks holding the same experts), over which ZeRO shards
// (ProcessGroups::sharding); without it expert_dp is dp's group and ep none. Under context
// parallelism also cp (attention's K/V blocks), and dp is the weights' replicas, dp × cp
// (ProcessGroups::dp_cp: the reduction plan's dp axis).
struct NcclGroups {
  // dp_prefetch: a second one over the sharding group for ZeRO 3's prefetched gathers.
  std::unique_ptr<NcclCommunicator> tp, pp, dp, ep, expert_dp, dp_prefetch, cp;

  explicit NcclGroups(const BackendPlacement& placement) {
    if (!placement.nccl) return;
    const ProcessGroups& groups = *placement.groups;
    tp = std::make_unique<NcclCommunicator>(groups.tp());
    pp = std::make_unique<NcclCommunicator>(groups.pp());
    dp = std::make_unique<NcclCommunicator>(groups.dp_cp());
    if (groups.ep() != nullptr) {
      ep = std::make_unique<NcclCommunicator>(*groups.ep());
      expert_dp = std::make_unique<NcclCommunicator>(*groups.expert_dp());
    }
    if (placement.plan.parameters_by_segment)
      dp_prefetch = std::make_unique<NcclCommunicator>(*groups.sharding().dp);
    if (groups.cp() != nullptr) cp = std::make_unique<NcclCommunicator>(*groups.cp());
  }
  NcclCommunicator* of(ParallelAxis axis) const {
    switch (axis) {
      case ParallelAxis::tp:
        return tp.get();
      case ParallelAxis::pp:
        return pp.get();
      case ParallelAxis::dp:
        return dp.get();
      case ParallelAxis::ep:
        STRATA_CHECK(ep != nullptr, "a reduction over ep without expert parallelism");
        return ep.get();
      case ParallelAxis::expert_dp:
        return expert_dp != nullptr ? expert_dp.get() : dp.get();
    }
    fail("unknown parallel axis");
  }
  // ZeRO's group (ProcessGroups::sharding().dp).
  NcclCommunicator& sharding() const { return expert_dp != nullptr ? *expert_dp : *dp; }
};

// Device arrays over NCCL, queued on the compute stream (parallel/mesh/reduction_interpreter.h);
// `scratch` holds what one operation receives.
struct NcclTransport {
  const NcclGroups& groups;
  float* scratch;
  cudaStream_t stream;

  NcclCommunicator* group(ParallelAxis axis) const { return groups.of(axis); }
  void all_reduce(NcclCommunicator& group, float* data, std::size_t count) {
    group.all_reduce_sum(data, count, stream);
  }
  void reduce_scatter(NcclCommunicator& group, float* data, std::size_t chunk) {
    group.reduce_scatter_sum(data, scratch, chunk, stream);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(data + group.rank() * chunk, scratch, chunk * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
  }
  void all_gather(NcclCommunicator& group, float* data, std::size_t chunk) {
    group.all_gather(data + group.rank() * chunk, data, chunk, stream);
  }
  void exchange_add(NcclCommunicator& group, float* data, std::size_t count, int peer) {
    group.exchange(data, scratch, count, peer, stream);
    cuda::add_into(data, scratch, static_cast<long>(count), stream);  // a + b = b + a
  }
};

}  // namespace strata
