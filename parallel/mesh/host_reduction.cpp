#include "parallel/mesh/host_reduction.h"

#include <algorithm>

#include "model/core/error.h"

namespace strata {

Communicator* ReductionGroups::of(ParallelAxis axis) const {
  switch (axis) {
    case ParallelAxis::tp:
      return tp;
    case ParallelAxis::dp:
      return dp;
    case ParallelAxis::pp:
      return pp;
  }
  return nullptr;
}

namespace {

// The range's chunk size over a group of n; the range must split evenly.
std::size_t chunk_of(const RangeReduction& op, int n) {
  STRATA_CHECK(op.range.size() % static_cast<std::size_t>(n) == 0,
               "a chunked reduction's range does not split over its group");
  return op.range.size() / static_cast<std::size_t>(n);
}

}  // namespace

void run_reductions(const std::vector<RangeReduction>& ops, float* buffer,
                    const ReductionGroups& groups, std::size_t buffer_begin) {
  using Kind = RangeReduction::Kind;
  std::vector<float> scratch;
  for (const RangeReduction& op : ops) {
    Communicator* group = groups.of(op.axis);
    STRATA_CHECK(op.range.begin >= buffer_begin, "a reduction before the buffer's first element");
    float* data = buffer + (op.range.begin - buffer_begin);
    const std::size_t count = op.range.size();
    if (group == nullptr) {
      STRATA_CHECK(op.kind != Kind::tied_exchange, "a tied exchange needs its pipeline group");
      continue;  // a group of one: sums and gathers leave the buffer as it is
    }
    switch (op.kind) {
      case Kind::all_reduce:
        group->all_reduce_sum(data, count);
        break;
      case Kind::reduce_scatter: {
        const std::size_t chunk = chunk_of(op, group->size());
        scratch.resize(chunk);
        group->reduce_scatter_sum(data, scratch.data(), chunk);
        std::copy(scratch.begin(), scratch.end(), data + group->rank() * chunk);
        break;
      }
      case Kind::all_gather: {
        const std::size_t chunk = chunk_of(op, group->size());
        group->all_gather(data + group->rank() * chunk, data, chunk);  // in place
        break;
      }
      case Kind::tied_exchange: {
        scratch.resize(count);
        group->send_recv(data, count, op.peer, scratch.data(), count, op.peer);
        // a + b on one end, b + a on the other: bitwise the same sum.
        for (std::size_t i = 0; i < count; ++i) data[i] += scratch[i];
        break;
      }
    }
  }
}

double sum_over_axes(double local, const std::vector<ParallelAxis>& axes,
                     const ReductionGroups& groups) {
  double sum = local;
  for (ParallelAxis axis : axes)
    if (Communicator* group = groups.of(axis)) group->all_reduce_sum(&sum, 1);
  return sum;
}

}  // namespace strata
