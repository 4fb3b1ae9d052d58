// The one interpreter of a reduction plan (parallel/mesh/reduction_plan.h), for any transport:
// the host's MPI communicators on host memory (parallel/mesh/host_reduction.h) and NCCL on device
// memory (train/backend/cuda_training.cpp) both run their plans through interpret_reductions, so
// what a plan's operations mean (which group, which chunk of the range is this rank's, that a group
// of one leaves the buffer as it is, that a tied exchange needs its group) is written once, and the
// transports only move bytes (docs/ARCHITECTURE.md §2).
//
// A Transport provides, for its own Group type:
//   Group* group(ParallelAxis)  the group of an axis; null for a group of one rank
//   void all_reduce(Group&, float* data, std::size_t count)
//   void reduce_scatter(Group&, float* data, std::size_t chunk)
//       the range [data, data + size·chunk) summed over the group, this rank's chunk of the sum
//       left at data + rank·chunk (the other chunks may hold anything)
//   void all_gather(Group&, float* data, std::size_t chunk)
//       in place: every member's chunk at data + rank·chunk reaches every member
//   void exchange_add(Group&, float* data, std::size_t count, int peer)
//       the range swapped with group rank `peer` and added to its own: a + b on one end and b + a
//       on the other, bitwise the same sum
//   and Group has rank() and size().
#pragma once

#include <cstddef>
#include <vector>

#include "model/core/error.h"
#include "parallel/mesh/reduction_plan.h"

namespace strata {

// The chunk size of a chunked operation on `op.range` over a group of `members`; the range must
// split evenly (the plan pads its ranges so that they do).
inline std::size_t reduction_chunk(const RangeReduction& op, int members) {
  STRATA_CHECK(op.range.size() % static_cast<std::size_t>(members) == 0,
               "a chunked reduction's range does not split over its group");
  return op.range.size() / static_cast<std::size_t>(members);
}

// Applies `ops` in order to `buffer`, which holds the plan buffer's elements from `buffer_begin`
// on (a ZeRO shard holds only its owned range). Collective over the groups the operations name:
// every member of a group runs the same operations on it in the same order.
template <class Transport>
void interpret_reductions(const std::vector<RangeReduction>& ops, float* buffer,
                          std::size_t buffer_begin, Transport& transport) {
  using Kind = RangeReduction::Kind;
  for (const RangeReduction& op : ops) {
    STRATA_CHECK(op.range.begin >= buffer_begin, "a reduction before the buffer's first element");
    auto* group = transport.group(op.axis);
    if (group == nullptr) {
      STRATA_CHECK(op.kind != Kind::tied_exchange, "a tied exchange needs its pipeline group");
      continue;  // a group of one: sums and gathers leave the buffer as it is
    }
    float* data = buffer + (op.range.begin - buffer_begin);
    switch (op.kind) {
      case Kind::all_reduce:
        transport.all_reduce(*group, data, op.range.size());
        break;
      case Kind::reduce_scatter:
        transport.reduce_scatter(*group, data, reduction_chunk(op, group->size()));
        break;
      case Kind::all_gather:
        transport.all_gather(*group, data, reduction_chunk(op, group->size()));
        break;
      case Kind::tied_exchange:  // after the dp sum: see parallel/mesh/reduction_plan.h
        transport.exchange_add(*group, data, op.range.size(), op.peer);
        break;
    }
  }
}

}  // namespace strata
