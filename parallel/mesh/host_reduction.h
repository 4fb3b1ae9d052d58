// Runs reduction plans (parallel/mesh/reduction_plan.h) on host memory over MPI communicators: the
// CPU backend's gradient sums, and the device backend's when its arrays are staged through the
// host.
#pragma once

#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/mesh/reduction_plan.h"

namespace strata {

// The groups a plan's axes name; null stands for a group of one rank (nothing to reduce).
struct ReductionGroups {
  Communicator* tp = nullptr;
  Communicator* dp = nullptr;
  Communicator* pp = nullptr;
  Communicator* ep = nullptr;         // expert parallelism (mesh.h: ep_group)
  Communicator* expert_dp = nullptr;  // the ranks holding the same experts (dp without ep)

  Communicator* of(ParallelAxis axis) const;
};

// Applies `ops` in order to `buffer` (the flat fp32 buffer of the plan's layout, holding its
// elements from `buffer_begin` on: a ZeRO shard holds only its owned range), collective over the
// groups they name: every member of a group must run the same operations on it in the same order.
void run_reductions(const std::vector<RangeReduction>& ops, float* buffer,
                    const ReductionGroups& groups, std::size_t buffer_begin = 0);

// `local` summed over the groups of `axes`, in double; the same value on every member.
double sum_over_axes(double local, const std::vector<ParallelAxis>& axes,
                     const ReductionGroups& groups);

}  // namespace strata
