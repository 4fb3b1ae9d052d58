#include "parallel/zero/sharded_parameters.h"

#include <algorithm>
#include <utility>

#include "model/core/error.h"

namespace strata {

GradientReduction gradient_reduction_from_name(const std::string& name) {
  if (const auto reduction = kGradientReductionChoices.find(name)) return *reduction;
  fail("unknown parallel.zero.gradient_reduction '", name, "' (expected ",
       kGradientReductionChoices.list(), ")");
}

float* ShardedParameters::Pool::take(std::size_t index, std::size_t size) {
  Held& h = held.at(index);
  if (h.values.empty() && size > 0) reserve(index, size);
  ++h.users;
  return h.values.data();
}

float* ShardedParameters::Pool::reserve(std::size_t index, std::size_t size) {
  Held& h = held.at(index);
  h.values.assign(size, 0.0f);
  live += size * sizeof(float);
  peak = std::max(peak, live);
  return h.values.data();
}

void ShardedParameters::Pool::free(std::size_t index) {
  Held& h = held.at(index);
  live -= h.values.size() * sizeof(float);
  std::vector<float>().swap(h.values);  // gives the memory back
}

std::vector<std::size_t> secondary_piece_counts(std::size_t size, int n) {
  const std::size_t ranks = static_cast<std::size_t>(n), piece = (size + ranks - 1) / ranks;
  std::vector<std::size_t> counts;
  for (std::size_t r = 0; r < ranks; ++r)
    counts.push_back(std::min(piece, size - std::min(size, r * piece)));
  return counts;
}

ShardedParameters::ShardedParameters(std::vector<ParameterSegment> segments,
                                     const ReductionPlan& plan, const ShardingGroups& groups,
                                     const ShardingOptions& options)
    : segments_(std::move(segments)), plan_(plan), groups_(groups), options_(options) {
  STRATA_CHECK(!plan.gradients_by_segment || groups.dp != nullptr, "ZeRO stage ", plan.zero_stage,
               " needs its data-parallel group");
  const bool by_node = options.hierarchical_partition || options.quantized_gradients;
  STRATA_CHECK(!by_node || (groups.nodes.intra != nullptr && groups.nodes.inter != nullptr),
               "ZeRO++ hpZ and qgZ need the node groups");
  STRATA_CHECK(plan.summed_over_ep.empty() || (groups.ep != nullptr && !by_node),
               "ZeRO under expert parallelism needs the ep group (and no hpZ or qgZ)");
  gathered_.held.resize(segments_.size());
  buckets_.held.resize(segments_.size());
  readers_.assign(segments_.size(), 1);
  secondary_.resize(segments_.size());
}

void ShardedParameters::bind(const float* weights, float* gradients, int backward_passes) {
  drain_prefetch();
  order_.begin(gradients != nullptr);
  weights_ = weights;
  gradients_ = gradients;
  backward_passes_ = backward_passes;
}

void ShardedParameters::set_readers(std::vector<int> readers_per_segment) {
  STRATA_CHECK(readers_per_segment.size() == segments_.size(), "readers of ",
               readers_per_segment.size(), " segments for ", segments_.size());
  readers_ = std::move(readers_per_segment);
}

const ParameterSegment& ShardedParameters::segment(int index) const {
  return segments_.at(static_cast<std::size_t>(index));
}

std::unique_ptr<SegmentGather> ShardedParameters::start_gather(const Gather& gather) {
  const auto [index, use] = gather;
  const ElementRange range = segment(index).range;
  float* out = gathered_.reserve(static_cast<std::size_t>(index), range.size());
  if (use == WeightUse::backward && options_.hierarchical_partition) {
    Communicator& node = *groups_.nodes.intra;
    const std::vector<float>& copy = secondary_[static_cast<std::size_t>(index)];
    const std::vector<std::size_t> counts = secondary_piece_counts(range.size(), node.size());
    STRATA_CHECK(copy.size() == counts[static_cast<std::size_t>(node.rank())],
                 "hpZ: a backward gather of segment '", segment(index).name,
                 "' before its forward");
    return start_segment_gather(node, counts, copy.data(), out, false);
  }
  const float* in = owned_piece(weights_, plan_.owned, range);
  const std::vector<std::size_t> counts = shard_counts(plan_, range, groups_.dp->size());
  const bool quantized = use == WeightUse::forward && options_.quantized_weights;
  return start_segment_gather(*groups_.dp, counts, in, out, quantized);
}

void ShardedParameters::keep_secondary(int index) {
  const std::size_t i = static_cast<std::size_t>(index);
  Communicator& node = *groups_.nodes.intra;
  const std::vector<std::size_t> counts =
      secondary_piece_counts(segment(index).range.size(), node.size());
  std::size_t begin = 0;
  for (int r = 0; r < node.rank(); ++r) begin += counts[static_cast<std::size_t>(r)];
  const float* gathered = gathered_.held[i].values.data();
  secondary_[i].assign(gathered + begin,
                       gathered + begin + counts[static_cast<std::size_t>(node.rank())]);
}

const float* ShardedParameters::acquire_weights(int index, WeightUse use) {
  STRATA_CHECK(weights_ != nullptr, "a forward pass before bind() gave it weights");
  const ElementRange range = segment(index).range;
  if (!plan_.parameters_by_segment) return weights_ + range.begin;
  const std::size_t i = static_cast<std::size_t>(index);
  if (gathered_.held[i].users > 0) return gathered_.take(i, range.size());  // in use already
  const Gather gather{index, use};
  if (in_flight_ && in_flight_gather_ == gather) {  // prefetched: wait for the data
    in_flight_->finish();
    in_flight_.reset();
    in_flight_gather_.first = -1;
    ++prefetch_hits_;
  } else {
    if (in_flight_gather_.first == index) drain_prefetch();  // fetched for the other pass
    start_gather(gather)->finish();
  }
  if (use == WeightUse::forward && options_.hierarchical_partition) keep_secondary(index);
  order_.record(gather);
  prefetch_after_gather();
  return gathered_.take(i, range.size());
}

void ShardedParameters::prefetch_after_gather() {
  const std::optional<Gather> predicted = order_.predicted_next();
  if (in_flight_ || !predicted) return;
  const Gather next = *predicted;
  if (!gathered_.held.at(static_cast<std::size_t>(next.first)).values.empty()) return;  // held
  // A backward gather from the node copy needs the copy of this step's forward first.
  if (next.second == WeightUse::backward && options_.hierarchical_partition &&
      !order_.recorded(Gather{next.first, WeightUse::forward}))
    return;
  in_flight_ = start_gather(next);
  in_flight_gather_ = next;
}

void ShardedParameters::drain_prefetch() {
  if (!in_flight_) return;
  in_flight_->finish();
  in_flight_.reset();
  gathered_.free(static_cast<std::size_t>(in_flight_gather_.first));
  in_flight_gather_.first = -1;
}

void ShardedParameters::release_weights(int index) {
  if (!plan_.parameters_by_segment) return;
  Held& h = gathered_.held.at(static_cast<std::size_t>(index));
  STRATA_CHECK(h.users > 0, "weights of segment '", segment(index).name, "' released twice");
  if (--h.users == 0) gathered_.free(static_cast<std::size_t>(index));
}

float* ShardedParameters::acquire_gradients(int index) {
  STRATA_CHECK(gradients_ != nullptr, "a backward pass without a gradient buffer");
  const ElementRange range = segment(index).range;
  if (!plan_.gradients_by_segment) return gradients_ + range.begin;
  return buckets_.take(static_cast<std::size_t>(index), range.size());
}

void ShardedParameters::release_gradients(int index) {
  if (!plan_.gradients_by_segment) return;
  Held& h = buckets_.held.at(static_cast<std::size_t>(index));
  STRATA_CHECK(h.users > 0, "gradients of segment '", segment(index).name, "' released twice");
  if (--h.users > 0) return;
  ++h.passes;
  if (options_.when == GradientReduction::micro_batch ||
      h.passes == backward_passes_ * readers_[static_cast<std::size_t>(index)])
    reduce_bucket(static_cast<std::size_t>(index));
}

void ShardedParameters::reduce_bucket(std::size_t index) {
  Held& h = buckets_.held[index];
  const ElementRange range = segments_[index].range;
  const ElementRange mine = intersect(range, plan_.owned);
  const std::vector<std::size_t> counts = shard_counts(plan_, range, groups_.dp->size());
  for (const ElementRange& dense : plan_.summed_over_ep) {
    const ElementRange part = intersect(dense, range);
    if (!part.empty())
      groups_.ep->all_reduce_sum(h.values.data() + (part.begin - range.begin), part.size());
  }
  received_.resize(mine.size());
  reduce_scatter_segment(*groups_.dp, counts, h.values.data(), received_.data(),
                         options_.quantized_gradients ? &groups_.nodes : nullptr);
  if (!mine.empty()) {
    float* owned = gradients_ + (mine.begin - plan_.owned.begin);
    for (std::size_t i = 0; i < mine.size(); ++i) owned[i] += received_[i];
  }
  h.passes = 0;
  buckets_.free(index);
}

bool ShardedParameters::has_pending_gradients() const {
  for (const Held& h : buckets_.held)
    if (!h.values.empty()) return true;
  return false;
}

std::size_t ShardedParameters::secondary_bytes() const {
  std::size_t bytes = 0;
  for (const std::vector<float>& copy : secondary_) bytes += copy.size() * sizeof(float);
  return bytes;
}

}  // namespace strata
