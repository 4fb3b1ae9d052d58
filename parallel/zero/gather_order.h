// The order in which a ZeRO-3 run gathers its segments, kept to predict the next gather
// (prefetch): a step runs the same schedule as the step before, so the k-th gather of a step is
// expected to be the k-th of the previous one. Training steps and evaluations (forward passes
// only) keep an order each. Used by the host's ShardedParameters and the CUDA NCCL path.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "model/core/element_range.h"

namespace strata {

template <class Gather>
class GatherOrder {
 public:
  // A new set of passes begins (a step when `training`, else an evaluation): the order recorded
  // so far becomes the previous one of its kind.
  void begin(bool training) {
    if (!current_.empty()) previous_[kind_] = std::move(current_);
    current_.clear();
    kind_ = training ? 1 : 0;
  }
  void record(const Gather& gather) { current_.push_back(gather); }
  // The gather expected next: the previous order's entry at this position, if it had one.
  std::optional<Gather> predicted_next() const {
    const std::vector<Gather>& previous = previous_[kind_];
    if (current_.size() >= previous.size()) return std::nullopt;
    return previous[current_.size()];
  }
  bool recorded(const Gather& gather) const {
    return std::find(current_.begin(), current_.end(), gather) != current_.end();
  }

 private:
  std::vector<Gather> previous_[2], current_;
  int kind_ = 1;
};

// Where this rank's piece of `range` starts in its shard `shard` (the plan's owned elements from
// owned.begin): the send buffer of a segment gather. A rank without a piece sends nothing from
// the shard's start.
template <class P>
P* owned_piece(P* shard, const ElementRange& owned, const ElementRange& range) {
  const ElementRange mine = intersect(range, owned);
  return mine.empty() ? shard : shard + (mine.begin - owned.begin);
}

}  // namespace strata
