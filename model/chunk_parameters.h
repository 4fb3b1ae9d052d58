// One chunk's view of its rank's parameters (virtual pipeline stages, ModelPartition in
// model/parameter_layout.h): a model of one chunk asks for its own layout's segments by index,
// and the rank's ParameterAccess holds the segments of every chunk, each once (zbv's rank 0 holds
// the tied wte once for its embedding chunk and its head chunk). Segments are matched by name
// ("wte", "h.3", "lnf"); within a segment the tensors come in the same order in both layouts, so
// a pointer to the segment's first element serves both.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "model/core/error.h"
#include "model/parameter_access.h"
#include "model/parameter_layout.h"

namespace strata {

// For each of `chunk`'s segments, its index in `rank`'s (Error if the rank lacks one or its size
// differs).
inline std::vector<int> chunk_segment_map(const std::vector<ParameterSegment>& chunk,
                                          const std::vector<ParameterSegment>& rank) {
  std::vector<int> map;
  for (const ParameterSegment& s : chunk) {
    int found = -1;
    for (std::size_t i = 0; i < rank.size(); ++i)
      if (rank[i].name == s.name) found = static_cast<int>(i);
    STRATA_CHECK(found >= 0 && rank[static_cast<std::size_t>(found)].range.size() == s.range.size(),
                 "segment '", s.name, "' of a chunk is not one of its rank's");
    map.push_back(found);
  }
  return map;
}

// How a rank's chunks reach its segments: per chunk, its segments' indices in the rank's; per
// rank segment, how many chunks read it (2 for zbv's tied wte on rank 0, else 1), which is how
// many times a backward pass of every chunk releases its gradients.
struct ChunkSegments {
  std::vector<std::vector<int>> rank_index;
  std::vector<int> readers;
};
inline ChunkSegments chunk_segments(const GptShape& shape, const ModelPartition& rank) {
  const std::vector<ParameterSegment> segments =
      ParameterLayout::for_partition(shape, rank).segments();
  ChunkSegments result;
  result.readers.assign(segments.size(), 0);
  for (int c = 0; c < rank.chunks(); ++c) {
    result.rank_index.push_back(chunk_segment_map(
        ParameterLayout::for_partition(shape, rank.chunk(c)).segments(), segments));
    for (int index : result.rank_index.back()) ++result.readers[static_cast<std::size_t>(index)];
  }
  return result;
}

template <class W, class G = W>
class ChunkParameters final : public ParameterAccess<W, G> {
 public:
  // `rank` (not owned) must outlive this object.
  ChunkParameters(ParameterAccess<W, G>& rank, std::vector<int> rank_index)
      : rank_(rank), rank_index_(std::move(rank_index)) {}

  const W* acquire_weights(int index, WeightUse use) override {
    return rank_.acquire_weights(at(index), use);
  }
  void release_weights(int index) override { rank_.release_weights(at(index)); }
  G* acquire_gradients(int index) override { return rank_.acquire_gradients(at(index)); }
  void release_gradients(int index) override { rank_.release_gradients(at(index)); }

 private:
  int at(int index) const { return rank_index_.at(static_cast<std::size_t>(index)); }
  ParameterAccess<W, G>& rank_;
  std::vector<int> rank_index_;
};

}  // namespace strata
