// The chunk order and the averaging of ZeRO++ qgZ (Wang et al., arXiv 2306.10209, §4.3): a
// gradient reduce-scatter over a data-parallel group of n = intra_size · inter_size ranks done as
// two int4 all-to-all hops, first inside each node, then across nodes, so that the slow inter-node
// links carry partial sums that are already reduced over a node.
//
// Ranks: dp_rank = node · intra_size + local (parallel/mesh/mesh.h: dp_rank = inter rank · k +
// intra rank), intra_size = dp ranks per node, inter_size = nodes. Each rank's gradient buffer is n
// equal chunks; chunk r is dp rank r's share of the result.
//
//   hop 1 (intra-node all-to-all): each rank sends to its node peer `local` the chunks of all
//     nodes' ranks with that local index, chunks {node · intra_size + local : node}. To make each
//     peer's part contiguous the chunks are put in send order (qgz_send_order) before being
//     quantised, each chunk as one packed shard (model/kernels/quantize_block.h); peer `local`
//     gets positions [local · inter_size, (local + 1) · inter_size).
//   After hop 1, rank (node, local) dequantises and sums the intra_size parts it received (one
//     per node peer) into inter_size fp32 chunks, node by node: the partial sums over its node of
//     chunks {j · intra_size + local : j}, already in the order hop 2 sends them.
//   hop 2 (inter-node all-to-all among the ranks with the same local index): partial j is
//     quantised again and goes to node j; rank (j, local) dequantises and sums the inter_size
//     partials it receives: the sum over all n ranks of its own chunk.
//
// Worked example, n = 4 as 2 nodes × 2 ranks (ranks 0, 1 on node 0; 2, 3 on node 1):
//   qgz_send_order(2, 2) = [0, 2, 1, 3]: send buffer [C0 C2 | C1 C3], local 0 gets C0 C2, local 1
//   gets C1 C3. Rank 1 (node 0, local 1) sums C1 and C3 over ranks 0, 1, then sends its C1 partial
//   to rank 1 (itself) and its C3 partial to rank 3 (node 1, local 1), which adds it to node 1's.
//   inverse: qgz_send_positions(2, 2) = [0, 2, 1, 3] (a transposition of a 2×2 grid is its own
//   inverse). With 3 nodes × 2 ranks: order [0, 2, 4, 1, 3, 5], positions [0, 3, 1, 4, 2, 5].
//
// In index terms the send order is the transpose of the (node, local) grid of chunks into
// (local, node): position = local · inter_size + node.
//
// Averaging: the sums stay sums through both hops (fp32, dequantise-add), and the mean is taken
// once at the end, sum · qgz_average_factor(n) with the factor fl(1/n): one rounding rather than
// one per hop, and nothing is gained by scaling earlier since block quantisation is relative to
// each block's absmax (scaling a block by a power of two changes no q at all, away from the ends
// of the float range).
//
// Error of the mean (int4, qmax = 7, per element, bound b(s) = s/2 + 7·2^-22·s of
// quantize_block.h): |mean − exact mean| ≤ (Q + R) / n, where
//   Q = Σ over the n sources of b(hop-1 scale of the source's block)
//     + Σ over the inter_size partials of b(hop-2 scale of the partial's block),
//   R = (n + 2)·2^-23·(Σ_r |g_r| + Q), the fp32 rounding of the sums and of the final product.
// tests/unit/ops_quantize_test.cpp simulates both hops and checks this bound.
#pragma once

#include <cstddef>
#include <vector>

#include "model/core/error.h"

namespace strata {

// The chunk (dp rank) at send position `position` of hop 1.
constexpr int qgz_send_chunk(int position, int intra_size, int inter_size) {
  const int local = position / inter_size, node = position % inter_size;
  return node * intra_size + local;
}

// The send position of chunk `chunk` (dp rank) in hop 1: the inverse of qgz_send_chunk.
constexpr int qgz_send_position(int chunk, int intra_size, int inter_size) {
  const int node = chunk / intra_size, local = chunk % intra_size;
  return local * inter_size + node;
}

namespace qgz_detail {
template <class Map>
std::vector<int> tabulate(int intra_size, int inter_size, Map map) {
  STRATA_CHECK(intra_size >= 1 && inter_size >= 1, intra_size, " x ", inter_size);
  std::vector<int> table(static_cast<std::size_t>(intra_size * inter_size));
  for (std::size_t i = 0; i < table.size(); ++i)
    table[i] = map(static_cast<int>(i), intra_size, inter_size);
  return table;
}
}  // namespace qgz_detail

// order[p] = the chunk at send position p, for p < intra_size · inter_size.
inline std::vector<int> qgz_send_order(int intra_size, int inter_size) {
  return qgz_detail::tabulate(intra_size, inter_size, qgz_send_chunk);
}

// positions[c] = the send position of chunk c: the inverse permutation of qgz_send_order.
inline std::vector<int> qgz_send_positions(int intra_size, int inter_size) {
  return qgz_detail::tabulate(intra_size, inter_size, qgz_send_position);
}

// The factor turning the sum over `ranks` ranks into their mean, applied once to the final sum.
constexpr float qgz_average_factor(int ranks) { return 1.0f / static_cast<float>(ranks); }

}  // namespace strata
