#include "parallel/mesh/host_reduction.h"

#include <algorithm>

#include "parallel/mesh/reduction_interpreter.h"

namespace strata {

Communicator* ReductionGroups::of(ParallelAxis axis) const {
  switch (axis) {
    case ParallelAxis::tp:
      return tp;
    case ParallelAxis::dp:
      return dp;
    case ParallelAxis::pp:
      return pp;
    case ParallelAxis::ep:
      return ep;
    case ParallelAxis::expert_dp:
      return expert_dp;
  }
  return nullptr;
}

namespace {

// Host memory over MPI communicators (parallel/mesh/reduction_interpreter.h).
class HostTransport {
 public:
  explicit HostTransport(const ReductionGroups& groups) : groups_(groups) {}

  Communicator* group(ParallelAxis axis) const { return groups_.of(axis); }
  void all_reduce(Communicator& group, float* data, std::size_t count) {
    group.all_reduce_sum(data, count);
  }
  void reduce_scatter(Communicator& group, float* data, std::size_t chunk) {
    scratch_.resize(chunk);
    group.reduce_scatter_sum(data, scratch_.data(), chunk);
    std::copy(scratch_.begin(), scratch_.end(), data + group.rank() * chunk);
  }
  void all_gather(Communicator& group, float* data, std::size_t chunk) {
    group.all_gather(data + group.rank() * chunk, data, chunk);  // in place
  }
  void exchange_add(Communicator& group, float* data, std::size_t count, int peer) {
    scratch_.resize(count);
    group.send_recv(data, count, peer, scratch_.data(), count, peer);
    for (std::size_t i = 0; i < count; ++i) data[i] += scratch_[i];
  }

 private:
  const ReductionGroups& groups_;
  std::vector<float> scratch_;  // what a reduction receives
};

}  // namespace

void run_reductions(const std::vector<RangeReduction>& ops, float* buffer,
                    const ReductionGroups& groups, std::size_t buffer_begin) {
  HostTransport transport(groups);
  interpret_reductions(ops, buffer, buffer_begin, transport);
}

double sum_over_axes(double local, const std::vector<ParallelAxis>& axes,
                     const ReductionGroups& groups) {
  double sum = local;
  for (ParallelAxis axis : axes)
    if (Communicator* group = groups.of(axis)) group->all_reduce_sum(&sum, 1);
  return sum;
}

}  // namespace strata
