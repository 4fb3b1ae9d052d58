// Shared by the tests that run a model's partitions (ranks as threads,
// tests/support/thread_group.h) against the whole model: the partition of one rank of a (pipeline
// stage, tensor-parallel rank) grid, and that rank's share of the whole model's parameters.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/parameter_layout.h"

namespace strata::testing {

// Tensor-parallel rank `tp_rank` of `tp_size` on pipeline stage `stage`, which holds the layers
// [stage_layers[stage].first, stage_layers[stage].second); the first stage has the embedding,
// the last the head.
inline ModelPartition stage_partition(const std::vector<std::pair<int, int>>& stage_layers,
                                      int stage, int tp_rank, int tp_size, bool sequence_parallel) {
  ModelPartition p;
  p.tp_rank = tp_rank;
  p.tp_size = tp_size;
  p.layer_begin = stage_layers[static_cast<std::size_t>(stage)].first;
  p.layer_end = stage_layers[static_cast<std::size_t>(stage)].second;
  p.has_embedding = stage == 0;
  p.has_head = stage == static_cast<int>(stage_layers.size()) - 1;
  p.sequence_parallel = sequence_parallel;
  return p;
}

// The local buffer of `part` cut from the whole model's parameters `params` (laid out as `whole`).
template <class T>
std::vector<T> slice_of(const ParameterLayout& whole, const ParameterLayout& part,
                        const std::vector<T>& params) {
  std::vector<T> local(part.total());
  for (const TensorView& t : part.tensors()) {
    const TensorView& w = whole.at(t.name);
    for (std::size_t i = 0; i < t.size; ++i)
      local[t.offset + i] = params[w.offset + t.slice.logical_index(static_cast<std::int64_t>(i))];
  }
  return local;
}

}  // namespace strata::testing
