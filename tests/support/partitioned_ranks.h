// The ranks of a (pipeline stage, tensor-parallel rank) grid of CPU models in one process, for the
// tests that run a model's partitions against the whole model: each stage's tensor-parallel ranks
// are threads of one ThreadGroup (tests/support/thread_group.h), each rank holds the model of its
// stage_partition (tests/support/partition_support.h), its weights and a zeroed gradient buffer.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "tests/support/partition_support.h"
#include "tests/support/thread_group.h"

namespace strata::testing {

template <class T>
struct PartitionedRanks {
  struct Rank {
    std::unique_ptr<ThreadRank> comm;
    std::unique_ptr<Gpt<T>> model;
    std::vector<T> params, grads;
  };
  std::vector<std::unique_ptr<ThreadGroup>> groups;  // one per stage
  std::vector<std::vector<Rank>> ranks;              // [stage][tp rank]

  // Stage s holds layers [stage_layers[s].first, .second); `weights_of` gives a rank's weights
  // from its partition's layout; each model keeps `slots` micro-batches of up to `max_batch`.
  PartitionedRanks(const GptShape& shape, const std::vector<std::pair<int, int>>& stage_layers,
                   int tp, bool sequence_parallel, int max_batch, int slots,
                   const GptOptions& options,
                   const std::function<std::vector<T>(const ParameterLayout&)>& weights_of)
      : ranks(stage_layers.size()) {
    for (int s = 0; s < static_cast<int>(stage_layers.size()); ++s) {
      groups.push_back(std::make_unique<ThreadGroup>(tp));
      for (int r = 0; r < tp; ++r) {
        Rank rank;
        rank.comm = std::make_unique<ThreadRank>(*groups.back(), r);
        rank.model = std::make_unique<Gpt<T>>(
            shape, stage_partition(stage_layers, s, r, tp, sequence_parallel), rank.comm.get(),
            max_batch, slots, options);
        rank.params = weights_of(rank.model->layout());
        rank.grads.assign(rank.model->layout().total(), T(0));
        ranks[static_cast<std::size_t>(s)].push_back(std::move(rank));
      }
    }
  }
};

}  // namespace strata::testing
