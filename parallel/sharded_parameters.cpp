#include "parallel/sharded_parameters.h"

#include <utility>

#include "model/core/error.h"

namespace strata {

GradientReduction gradient_reduction_from_name(const std::string& name) {
  if (name == "step") return GradientReduction::step;
  if (name == "micro_batch") return GradientReduction::micro_batch;
  fail("unknown parallel.zero.gradient_reduction '", name, "' (expected step or micro_batch)");
}

float* ShardedParameters::Pool::take(std::size_t index, std::size_t size) {
  Held& h = held.at(index);
  if (h.values.empty() && size > 0) {
    h.values.assign(size, 0.0f);
    live += size * sizeof(float);
    peak = std::max(peak, live);
  }
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

ShardedParameters::ShardedParameters(std::vector<ParameterSegment> segments,
                                     const ReductionPlan& plan, Communicator* dp,
                                     GradientReduction when)
    : segments_(std::move(segments)), plan_(plan), dp_(dp), when_(when) {
  STRATA_CHECK(!plan.gradients_by_segment || dp != nullptr, "ZeRO stage ", plan.zero_stage,
               " needs its data-parallel group");
  gathered_.held.resize(segments_.size());
  buckets_.held.resize(segments_.size());
}

void ShardedParameters::bind(const float* weights, float* gradients, int backward_passes) {
  drain_prefetch();
  if (!order_.empty()) previous_order_[order_kind_] = std::move(order_);
  order_.clear();
  order_kind_ = gradients != nullptr ? 1 : 0;
  weights_ = weights;
  gradients_ = gradients;
  backward_passes_ = backward_passes;
}

const ParameterSegment& ShardedParameters::segment(int index) const {
  return segments_.at(static_cast<std::size_t>(index));
}

std::unique_ptr<PendingCollective> ShardedParameters::gather(int index, float* out, bool start) {
  const ElementRange range = segment(index).range;
  const ElementRange mine = intersect(range, plan_.owned);
  const float* in = mine.empty() ? weights_ : weights_ + (mine.begin - plan_.owned.begin);
  const std::vector<std::size_t> counts = shard_counts(plan_, range, dp_->size());
  if (start) return dp_->start_all_gather_v(in, out, std::span<const std::size_t>(counts));
  dp_->all_gather_v(in, out, std::span<const std::size_t>(counts));
  return nullptr;
}

const float* ShardedParameters::acquire_weights(int index) {
  STRATA_CHECK(weights_ != nullptr, "a forward pass before bind() gave it weights");
  const ElementRange range = segment(index).range;
  if (!plan_.parameters_by_segment) return weights_ + range.begin;
  const std::size_t i = static_cast<std::size_t>(index);
  if (gathered_.held[i].users > 0) return gathered_.take(i, range.size());  // in use already
  if (in_flight_segment_ == index) {  // prefetched: its buffer is reserved, wait for the data
    in_flight_->wait();
    in_flight_.reset();
    in_flight_segment_ = -1;
    ++prefetch_hits_;
  } else {
    gather(index, gathered_.reserve(i, range.size()), false);
  }
  order_.push_back(index);
  prefetch_after_gather();
  return gathered_.take(i, range.size());
}

void ShardedParameters::prefetch_after_gather() {
  const std::vector<int>& previous = previous_order_[order_kind_];
  if (in_flight_ || order_.size() >= previous.size()) return;
  const int next = previous[order_.size()];
  const std::size_t i = static_cast<std::size_t>(next);
  if (!gathered_.held.at(i).values.empty()) return;  // held (in use): nothing to fetch
  in_flight_ = gather(next, gathered_.reserve(i, segment(next).range.size()), true);
  in_flight_segment_ = next;
}

void ShardedParameters::drain_prefetch() {
  if (!in_flight_) return;
  in_flight_->wait();
  in_flight_.reset();
  gathered_.free(static_cast<std::size_t>(in_flight_segment_));
  in_flight_segment_ = -1;
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
  if (when_ == GradientReduction::micro_batch || h.passes == backward_passes_)
    reduce_bucket(static_cast<std::size_t>(index));
}

void ShardedParameters::reduce_bucket(std::size_t index) {
  Held& h = buckets_.held[index];
  const ElementRange range = segments_[index].range;
  const ElementRange mine = intersect(range, plan_.owned);
  const std::vector<std::size_t> counts = shard_counts(plan_, range, dp_->size());
  received_.resize(mine.size());
  dp_->reduce_scatter_sum_v(h.values.data(), received_.data(),
                            std::span<const std::size_t>(counts));
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

}  // namespace strata
