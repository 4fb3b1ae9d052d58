// The segment collectives of ZeRO stages 2/3 and ZeRO++ (parallel/zero/segment_collectives.h), run
// inside mpirun (4 and 8 ranks, nodes of 2): a segment whose pieces are uneven (some empty) is
// reduce-scattered plainly (the exact fp32 sum of each piece, bitwise the uneven reduce-scatter's)
// and by qgZ's two int4 hops (within the bound of quantize_block.h per hop: each source's block
// scale / 2 in hop 1, each node partial's in hop 2); gathered plainly (exact) and by qwZ (each
// piece within its int8 block scale / 2, the same on every rank); a small segment takes the plain
// path even with qgZ on.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "model/kernels/quantize_block.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/mesh.h"
#include "parallel/mesh/process_groups.h"
#include "parallel/zero/segment_collectives.h"

namespace strata {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Data parallelism over the whole world, nodes of 2 ranks.
struct DataParallelWorld {
  Mesh mesh{world_size(), world_rank(), 1, 1, 0, 2};
  MpiCommunicator world{MPI_COMM_WORLD, 2};
  ProcessGroups groups{mesh, world};
  NodeGroups nodes{&groups.dp_intra_node(), &groups.dp_inter_node()};
};

// Rank r's gradient of element i: varied magnitudes so that blocks get different scales.
float value(int rank, std::size_t i) {
  const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank);
  return static_cast<float>(x * (1 + static_cast<double>(i % 700) / 50.0));
}

// Uneven pieces: rank r owns 1500·(r % 3) + 700 elements, except rank 1, which owns none;
// starts[r] is where piece r begins, starts[n] the total.
struct UnevenPieces {
  std::vector<std::size_t> counts, starts{0};
  explicit UnevenPieces(int n) {
    for (int r = 0; r < n; ++r) {
      counts.push_back(r == 1 ? 0 : 1500 * static_cast<std::size_t>(r % 3) + 700);
      starts.push_back(starts.back() + counts.back());
    }
  }
};
// Block scale of values[0..len) (one quantisation block).
float block_scale(const std::vector<double>& values, std::size_t begin, std::size_t len,
                  QuantFormat format, double extra_absmax = 0) {
  double absmax = 0;
  for (std::size_t i = begin; i < begin + len; ++i) absmax = std::max(absmax, std::fabs(values[i]));
  return quant_scale(static_cast<float>(absmax + extra_absmax), format);
}

TEST(SegmentCollectives, QgzReduceScatterIsTheSumWithinItsBoundAndThePlainPathIsExact) {
  DataParallelWorld s;
  Communicator& dp = s.groups.dp();
  const int n = dp.size(), me = dp.rank();
  const UnevenPieces pieces(n);
  const std::vector<std::size_t>& counts = pieces.counts;
  const std::vector<std::size_t>& starts = pieces.starts;
  const std::size_t total = starts.back(), own = counts[static_cast<std::size_t>(me)];
  ASSERT_GE(total, kGradientQuantBlock * static_cast<std::size_t>(n));  // qgZ is taken
  std::vector<float> segment(total);
  for (std::size_t i = 0; i < total; ++i) segment[i] = value(me, i);

  std::vector<float> plain(own + 1, -1.0f), reference(own + 1, -1.0f), qgz(own + 1, -1.0f);
  reduce_scatter_segment(dp, counts, segment.data(), plain.data(), nullptr);
  dp.reduce_scatter_sum_v(segment.data(), reference.data(), std::span<const std::size_t>(counts));
  EXPECT_EQ(plain, reference);
  reduce_scatter_segment(dp, counts, segment.data(), qgz.data(), &s.nodes);
  EXPECT_EQ(qgz[own], -1.0f) << "wrote past its piece";

  // The bound, per int4 block of this rank's piece (hop 1 and hop 2 both cut it at its start).
  const int intra = s.nodes.intra->size(), inter = s.nodes.inter->size();
  const std::size_t first = starts[static_cast<std::size_t>(me)];
  std::vector<double> exact(own, 0.0);
  std::vector<std::vector<double>> source(static_cast<std::size_t>(n), std::vector<double>(own));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < own; ++i) {
      source[static_cast<std::size_t>(r)][i] = value(r, first + i);
      exact[i] += source[static_cast<std::size_t>(r)][i];
    }
  for (std::size_t b = 0; b * kGradientQuantBlock < own; ++b) {
    const std::size_t begin = b * kGradientQuantBlock;
    const std::size_t len = std::min(kGradientQuantBlock, own - begin);
    double hop1 = 0;  // Σ over sources of scale / 2 (a hop inside a one-rank node is exact)
    std::vector<double> hop1_of_node(static_cast<std::size_t>(inter), 0.0);
    for (int r = 0; r < n; ++r) {
      const double bound = intra == 1 ? 0.0
                                      : block_scale(source[static_cast<std::size_t>(r)], begin, len,
                                                    QuantFormat::int4) /
                                            2.0;
      hop1 += bound;
      hop1_of_node[static_cast<std::size_t>(r / intra)] += bound;
    }
    double hop2 =
        0;  // Σ over node partials of scale / 2, the partial's absmax within hop 1's error
    if (inter > 1)
      for (int node = 0; node < inter; ++node) {
        std::vector<double> partial(own, 0.0);
        for (int l = 0; l < intra; ++l)
          for (std::size_t i = begin; i < begin + len; ++i)
            partial[i] += source[static_cast<std::size_t>(node * intra + l)][i];
        hop2 += block_scale(partial, begin, len, QuantFormat::int4,
                            hop1_of_node[static_cast<std::size_t>(node)]) /
                2.0;
      }
    for (std::size_t i = begin; i < begin + len; ++i)
      ASSERT_LE(std::fabs(qgz[i] - exact[i]), (hop1 + hop2) * (1 + 1e-4) + 1e-5)
          << "rank " << me << " element " << i;
  }
  // And the quantisation did act (the bound is not met by equality with the plain sum).
  double differs = 0;
  for (std::size_t i = 0; i < own; ++i) differs += std::fabs(qgz[i] - plain[i]);
  if (own > 0) {
    EXPECT_GT(differs, 0.0);
  }

  // A segment below one block per rank: the plain reduce-scatter, exactly.
  const std::vector<std::size_t> small(static_cast<std::size_t>(n), 3);
  std::vector<float> tiny(3 * static_cast<std::size_t>(n)), a(3), b(3);
  for (std::size_t i = 0; i < tiny.size(); ++i) tiny[i] = value(me, i);
  reduce_scatter_segment(dp, small, tiny.data(), a.data(), &s.nodes);
  dp.reduce_scatter_sum_v(tiny.data(), b.data(), std::span<const std::size_t>(small));
  EXPECT_EQ(a, b);
}

TEST(SegmentCollectives, QwzGatherIsWithinHalfAScaleAndTheSameOnEveryRank) {
  DataParallelWorld s;
  Communicator& dp = s.groups.dp();
  const int n = dp.size(), me = dp.rank();
  const UnevenPieces pieces(n);
  const std::vector<std::size_t>& counts = pieces.counts;
  const std::vector<std::size_t>& starts = pieces.starts;
  const std::size_t total = starts.back();
  std::vector<float> mine(counts[static_cast<std::size_t>(me)]);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = value(me, i);
  std::vector<float> plain(total), quantized(total);
  start_segment_gather(dp, counts, mine.data(), plain.data(), false)->finish();
  start_segment_gather(dp, counts, mine.data(), quantized.data(), true)->finish();
  for (int r = 0; r < n; ++r) {
    std::vector<double> piece;
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
      ASSERT_EQ(plain[starts[static_cast<std::size_t>(r)] + i], value(r, i));
      piece.push_back(value(r, i));
    }
    for (std::size_t i = 0; i < piece.size(); ++i) {
      const std::size_t block = i / kWeightQuantBlock * kWeightQuantBlock;
      const double scale = block_scale(
          piece, block, std::min(kWeightQuantBlock, piece.size() - block), QuantFormat::int8);
      ASSERT_LE(std::fabs(quantized[starts[static_cast<std::size_t>(r)] + i] - piece[i]),
                scale / 2 * (1 + 1e-4))
          << "piece " << r << " element " << i;
    }
  }
  // Every rank dequantised the same bytes: the same weights everywhere.
  std::vector<float> first(total);
  if (me == 0) first = quantized;
  dp.broadcast(std::span<float>(first), 0);
  EXPECT_EQ(first, quantized);
}

}  // namespace
}  // namespace strata
