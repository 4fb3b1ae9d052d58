// The collectives that move one segment of a ZeRO-sharded flat buffer
// (parallel/mesh/reduction_plan.h) between the data-parallel ranks owning its pieces, which are
// uneven (shard_counts: a segment falls on one or a few shards): the weight all-gather and the
// gradient reduce-scatter, plain or in ZeRO++'s quantised forms (Wang et al., arXiv 2306.10209;
// model/kernels/quantize_block.h has the arithmetic, its error bound and the packed layout):
//   qwZ: each rank packs its piece in int8 blocks of kWeightQuantBlock values (blocks start at
//     the piece's start, so none straddles a shard), the packed pieces are all-gathered as bytes
//     and every rank, this one included, dequantises all of them: every rank computes with the
//     same weights.
//   qgZ: the reduce-scatter becomes two all-to-all hops of int4 blocks (kGradientQuantBlock):
//     inside the node, each rank sends node peer `local` the pieces owned by the ranks with local
//     index `local` on every node (parallel/zero/qgz_order.h: that is hop 1's send order),
//     dequantises and sums in fp32 what it received for its own local index, then sends those
//     partial sums, re-quantised, across nodes to their owners among the ranks of its local index,
//     which dequantise and sum them. A hop over one rank moves nothing and quantises nothing. The
//     result is the sum (the gradients already carry the 1/(dp·accumulation) of the mean: the loss
//     scale of the step divides by it). Segments smaller than kGradientQuantBlock per dp rank are
//     reduced plainly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/kernels/quantize_block.h"
#include "parallel/comm/communicator.h"
#include "parallel/mesh/sharding_groups.h"

namespace strata {

inline constexpr std::size_t kWeightQuantBlock = 2048;   // qwZ, int8
inline constexpr std::size_t kGradientQuantBlock = 512;  // qgZ, int4

// The packed forms of a piece of `elements` values: qwZ's int8 weights and qgZ's int4 gradients
// (their `bytes` is what a quantised collective moves for the piece).
QuantizedShardLayout weight_layout(std::size_t elements);
QuantizedShardLayout gradient_layout(std::size_t elements);

// A segment gather in flight (start_segment_gather); finish() waits for it and, quantised,
// dequantises every piece into the output.
class SegmentGather {
 public:
  SegmentGather(Communicator& group, std::span<const std::size_t> counts, const float* mine,
                float* out, bool quantized);
  void finish();

 private:
  std::vector<std::size_t> counts_;       // elements per member
  std::vector<std::size_t> byte_counts_;  // packed bytes per member (quantised)
  std::vector<std::uint8_t> mine_packed_, all_packed_;
  float* out_;
  bool quantized_;
  std::unique_ptr<PendingCollective> pending_;
};

// Starts the all-gather over `group` of pieces of counts[r] elements (this rank's at `mine`) into
// `out` (Σ counts, in member order); int8-quantised when `quantized` (qwZ).
std::unique_ptr<SegmentGather> start_segment_gather(Communicator& group,
                                                    std::span<const std::size_t> counts,
                                                    const float* mine, float* out, bool quantized);

// `mine` (counts[dp.rank()] elements) = the sum over `dp` of every member's piece of `segment`
// (Σ counts elements, pieces in member order) owned by this rank. With `qgz` (not null): the two
// quantised hops above, for segments of at least kGradientQuantBlock elements per dp rank.
void reduce_scatter_segment(Communicator& dp, std::span<const std::size_t> counts,
                            const float* segment, float* mine, const NodeGroups* qgz);

}  // namespace strata
