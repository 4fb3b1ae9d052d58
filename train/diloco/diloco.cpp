#include "train/diloco/diloco.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <thread>

#include "model/core/counter_rng.h"
#include "model/core/error.h"
#include "train/diloco/diloco_fragments.h"
#include "train/diloco/diloco_sync.h"
#include "train/optimizer/lr_schedule.h"

namespace strata {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string diloco_state_prefix(int worker) {
  return worker == 0 ? "" : "diloco/worker_" + std::to_string(worker) + "/";
}

Diloco::Diloco(const DilocoConfig& config, std::uint64_t seed, const ParameterLayout& layout,
               const GptShape& shape, const DilocoPlacement& placement,
               const OptimizerConfig& inner, int total_steps, const TestHooks& hooks)
    : config_(config),
      inner_(inner),
      total_steps_(total_steps),
      seed_(seed),
      placement_(placement),
      averaging_(config.averaging),
      compression_(config.compression),
      optimizer_(placement.share, {config.outer_lr, config.outer_momentum, config.nesterov}),
      test_kill_in_averaging_(hooks.kill_in_averaging),
      test_poison_(hooks.poison_outer),
      test_poison_worker_(hooks.poison_worker) {
  STRATA_CHECK(placement.outer != nullptr && placement.outer->size() == placement.workers &&
                   placement.outer->rank() == placement.worker,
               "DiLoCo: the outer group must hold one rank per worker, ranked by worker");
  if (config.error_feedback && compression_ != OuterCompression::none)
    residual_.assign(placement.share.size(), 0.0f);
  fragment_ranges_ = diloco_fragment_ranges(layout, shape, config.fragments);
  fragment_sizes_ = diloco_fragment_sizes(shape, config.fragments);
  // The pieces: the share's part of each fragment, cut at the end of wte (see the header).
  const std::vector<ParameterSegment> segments = layout.segments();
  const SegmentIndex index = segment_index(segments);
  const std::size_t wte_end =
      index.wte >= 0 ? segments[static_cast<std::size_t>(index.wte)].range.end : 0;
  const ElementRange held = intersect(placement.share, {0, layout.total()});
  for (const ElementRange& fragment : fragment_ranges_) {
    std::vector<ElementRange> pieces;
    const ElementRange part = intersect(fragment, held);
    for (const ElementRange& piece :
         {intersect(part, {0, wte_end}), intersect(part, {wte_end, layout.total()})})
      if (!piece.empty()) pieces.push_back(piece);
    pieces_.push_back(pieces);
  }
}

std::vector<int> Diloco::fragments_due(std::int64_t step) const {
  std::vector<int> due;
  const std::int64_t H = config_.inner_steps, F = config_.fragments;
  for (int f = 0; f < F; ++f) {
    const std::int64_t offset = f * H / F;
    if (step >= std::max<std::int64_t>(offset, 1) && (step - offset) % H == 0) due.push_back(f);
  }
  return due;
}

std::int64_t Diloco::round_of(int fragment, std::int64_t step) const {
  const std::int64_t H = config_.inner_steps;
  const std::int64_t offset = fragment * H / config_.fragments;
  if (offset == 0) return step <= 0 ? 0 : (step - 1) / H;
  return step <= offset ? 0 : (step - 1 - offset) / H + 1;
}

std::int64_t Diloco::previous_sync_step(std::int64_t step) const {
  for (std::int64_t s = step - 1; s >= 1; --s)
    if (!fragments_due(s).empty()) return s;
  return -1;
}

std::int64_t Diloco::next_sync_step(std::int64_t step) const {
  for (std::int64_t s = step + 1;; ++s)
    if (!fragments_due(s).empty()) return s;
}

void Diloco::set_sync_group(const SyncGroup& group) {
  STRATA_CHECK(group.outer != nullptr && group.metrics != nullptr &&
                   group.outer->size() == group.workers && group.outer->rank() == group.worker &&
                   static_cast<int>(group.joining.size()) == group.workers,
               "DiLoCo: a sync group must hold one rank per member, ranked by member");
  placement_.outer = group.outer;
  placement_.metrics = group.metrics;
  placement_.worker = group.worker;
  placement_.workers = group.workers;
  joining_ = group.joining;
}

void Diloco::hand_state_to_joiners(MasterWeights& weights, int donor) {
  Communicator& outer = *placement_.outer;
  const std::size_t n = placement_.share.size();
  const bool joiner =
      joining_.at(static_cast<std::size_t>(placement_.worker)) && placement_.worker != donor;
  for (int member = 0; member < placement_.workers; ++member) {
    if (!joining_[static_cast<std::size_t>(member)] || member == donor) continue;
    if (placement_.worker == donor) {
      outer.send(optimizer_.anchor().data(), n, member);
      outer.send(optimizer_.momentum().data(), n, member);
    } else if (placement_.worker == member) {
      outer.recv(optimizer_.anchor().data(), n, donor);
      outer.recv(optimizer_.momentum().data(), n, donor);
    }
  }
  if (!joiner) return;
  std::fill(residual_.begin(), residual_.end(), 0.0f);
  for (std::size_t f = 0; f < fragment_ranges_.size(); ++f) {
    std::vector<float> anchor;  // the share's part of the fragment
    for (const ElementRange& piece : pieces_[f]) {
      const float* a = optimizer_.anchor().data() + (piece.begin - placement_.share.begin);
      anchor.insert(anchor.end(), a, a + piece.size());
    }
    distribute(weights, static_cast<int>(f), anchor);
  }
}

void Diloco::start(MasterWeights& weights) {
  std::vector<float> params(placement_.share.size());
  weights.read_master_weights(placement_.share, params.data());
  optimizer_.set_anchor(params.data());
  std::fill(optimizer_.momentum().begin(), optimizer_.momentum().end(), 0.0f);
  std::fill(residual_.begin(), residual_.end(), 0.0f);
}

Diloco::~Diloco() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

std::vector<OuterSyncReport> Diloco::after_inner_step(MasterWeights& weights, std::int64_t step) {
  std::vector<OuterSyncReport> reports;
  if (pending_ && pending_->started) {
    join(*pending_);
    reports.push_back(apply(weights, *pending_));
    pending_.reset();
  }
  if (!config_.overlap) {
    average_due(weights, step);
    std::vector<OuterSyncReport> applied = apply_averaged(weights);
    reports.insert(reports.end(), applied.begin(), applied.end());
    return reports;
  }
  prepare_due(weights, step);
  return reports;
}

void Diloco::prepare_due(MasterWeights& weights, std::int64_t step) {
  for (int f : fragments_due(step)) {
    STRATA_CHECK(!pending_, "DiLoCo: two syncs in flight");
    residual_before_ = residual_;
    pending_ = prepare(weights, f, step);
  }
}

void Diloco::wait_pending() {
  if (pending_->started)
    join(*pending_);
  else
    average(*pending_);
}

void Diloco::average_pending_again() {
  if (pending_->thread.joinable()) pending_->thread.join();
  pending_->error = nullptr;
  if (!residual_before_.empty()) residual_ = residual_before_;
  set_members(*pending_);
  average(*pending_);
}

std::vector<OuterSyncReport> Diloco::apply_pending(MasterWeights& weights) {
  std::vector<OuterSyncReport> reports{apply(weights, *pending_)};
  pending_.reset();
  return reports;
}

void Diloco::drop_pending() {
  if (!pending_) return;
  if (pending_->thread.joinable()) pending_->thread.join();
  if (!residual_before_.empty()) residual_ = residual_before_;
  pending_.reset();
}

void Diloco::average_due(MasterWeights& weights, std::int64_t step) {
  STRATA_CHECK(averaged_.empty(), "DiLoCo: averaged syncs neither applied nor discarded");
  residual_before_ = residual_;
  for (int f : fragments_due(step)) {
    averaged_.push_back(prepare(weights, f, step));
    average(*averaged_.back());
  }
}

std::vector<OuterSyncReport> Diloco::apply_averaged(MasterWeights& weights) {
  std::vector<OuterSyncReport> reports;
  for (const std::unique_ptr<Sync>& sync : averaged_) reports.push_back(apply(weights, *sync));
  averaged_.clear();
  return reports;
}

void Diloco::discard_averaged() {
  if (!residual_before_.empty()) residual_ = residual_before_;
  averaged_.clear();
}

void Diloco::begin_inner_step() {
  if (!pending_ || pending_->started) return;
  Sync* sync = pending_.get();
  sync->started = true;
  sync->thread = std::thread([this, sync] {
    try {
      average(*sync);
    } catch (...) {
      sync->error = std::current_exception();
    }
  });
}

void Diloco::resume(MasterWeights& weights, std::int64_t step) {
  if (config_.overlap) prepare_due(weights, step);
}

std::vector<OuterSyncReport> Diloco::finish(MasterWeights& weights) {
  if (!pending_) return {};
  if (pending_->started)
    join(*pending_);
  else
    average(*pending_);
  std::vector<OuterSyncReport> reports{apply(weights, *pending_)};
  pending_.reset();
  return reports;
}

void Diloco::join(Sync& sync) {
  const auto start = std::chrono::steady_clock::now();
  sync.thread.join();
  sync.wait_seconds = seconds_since(start);
  if (sync.error) std::rethrow_exception(sync.error);
}

std::unique_ptr<Diloco::Sync> Diloco::prepare(MasterWeights& weights, int fragment,
                                              std::int64_t step) {
  auto sync = std::make_unique<Sync>();
  OuterSyncReport& report = sync->report;
  report.step = step;
  report.fragment = fragment;
  report.fragments = config_.fragments;
  report.elements = fragment_sizes_[static_cast<std::size_t>(fragment)];
  report.model_elements =
      std::accumulate(fragment_sizes_.begin(), fragment_sizes_.end(), std::size_t{0});
  report.round = round_of(fragment, step);
  for (const ElementRange& piece : pieces_[static_cast<std::size_t>(fragment)]) {
    std::vector<float> theta(piece.size());
    weights.read_master_weights(piece, theta.data());
    sync->start.push_back(std::move(theta));
  }
  set_members(*sync);
  return sync;
}

void Diloco::set_members(Sync& sync) const {
  OuterSyncReport& report = sync.report;
  // Fragments fail independently: the key of a sync is (seed, fragment, round).
  const std::uint64_t key = hash_combine(seed_, static_cast<std::uint64_t>(report.fragment));
  report.dropped = dropped_workers(key, report.round, placement_.workers, config_.drop_probability);
  // Elastic: a joining member is left out as a dropped one is (it takes the state afterwards).
  for (std::size_t w = 0; w < joining_.size() && w < report.dropped.size(); ++w)
    if (joining_[w]) report.dropped[w] = true;
  sync.round = AveragingRound{
      report.round,
      key,
      report.dropped,
      2,
      {},
      {config_.aggregation, config_.trim, config_.clip_radius, config_.clip_iterations}};
  sync.dropped = report.dropped[static_cast<std::size_t>(placement_.worker)];
  const std::vector<ElementRange>& pieces = pieces_[static_cast<std::size_t>(report.fragment)];
  sync.values.clear();
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    std::vector<float> values = sync.start[p];
    if (compression_ != OuterCompression::none) {
      const float* anchor = optimizer_.anchor().data() + (pieces[p].begin - placement_.share.begin);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = anchor[i] - sync.start[p][i];
    }
    sync.values.push_back(std::move(values));
  }
  if (placement_.workers == 1) return;
  poison(sync);
  std::vector<std::vector<float>> deltas = sync.values;
  if (compression_ == OuterCompression::none)
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      const float* anchor = optimizer_.anchor().data() + (pieces[p].begin - placement_.share.begin);
      for (std::size_t i = 0; i < deltas[p].size(); ++i) deltas[p][i] = anchor[i] - deltas[p][i];
    }
  sync.own_norm = outer_gradient_norm(pieces, deltas);
}

void Diloco::average(Sync& sync) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ElementRange>& pieces = pieces_[static_cast<std::size_t>(sync.report.fragment)];
  if (placement_.workers > 1) screen(sync);
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    // The test hook: SIGKILL between the two pieces, the others holding part of an average
    // (tests/mpi/elastic_diloco_test.cpp).
    if (p == 1 && sync.report.step == test_kill_in_averaging_) std::raise(SIGKILL);
    float* residual =
        residual_.empty() ? nullptr : residual_.data() + (pieces[p].begin - placement_.share.begin);
    average_across_workers(*placement_.outer, averaging_, sync.values[p].data(), pieces[p].size(),
                           sync.round, compression_, residual);
  }
  sync.report.seconds = seconds_since(start);
}

double Diloco::outer_scale(std::int64_t step) const {
  if (config_.outer_schedule == OuterSchedule::constant) return 1;
  // The rate of the period's last inner step (0-based step − 1) over the peak: below 1 in the
  // warm-up and while the schedule decays.
  const double rate = learning_rate(inner_, static_cast<int>(step - 1), total_steps_) / inner_.lr;
  return std::clamp(rate, 0.0, 1.0);
}

OuterSyncReport Diloco::apply(MasterWeights& weights, Sync& sync) {
  OuterSyncReport report = sync.report;
  const double scale = outer_scale(report.step);
  if (config_.outer_schedule == OuterSchedule::inner) report.outer_scale = scale;
  report.hidden_seconds = sync.started ? std::max(0.0, report.seconds - sync.wait_seconds) : 0;
  const std::vector<ElementRange>& pieces = pieces_[static_cast<std::size_t>(report.fragment)];
  std::vector<std::vector<float>> deltas, updated;
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    const ElementRange piece = pieces[p];
    const std::size_t n = piece.size();
    const std::vector<float>& start = sync.start[p];
    // θ now: θ_s, or θ_{s+1} when the sync overlapped a step.
    std::vector<float> now = start;
    if (sync.started) weights.read_master_weights(piece, now.data());
    const float* anchor = optimizer_.anchor().data() + (piece.begin - placement_.share.begin);
    std::vector<float> mean = sync.values[p], delta(n, 0.0f), next(n);
    if (compression_ != OuterCompression::none)
      for (std::size_t i = 0; i < n; ++i) mean[i] = anchor[i] - sync.values[p][i];
    if (sync.dropped) {  // keeps its own θ, its period restarting from θ_s
      optimizer_.set_anchor(piece, start.data());
      next = now;
    } else {
      for (std::size_t i = 0; i < n; ++i) delta[i] = anchor[i] - mean[i];
      optimizer_.step(piece, mean.data(), next.data(), scale);
      if (sync.started)  // the overlapped step's own progress, kept
        for (std::size_t i = 0; i < n; ++i) next[i] += now[i] - start[i];
    }
    deltas.push_back(std::move(delta));
    updated.push_back(std::move(next));
  }
  std::vector<float> joined;  // the pieces are consecutive: the share's part of the fragment
  for (const std::vector<float>& u : updated) joined.insert(joined.end(), u.begin(), u.end());
  distribute(weights, report.fragment, joined);
  report.outer_gradient_norm = outer_gradient_norm(pieces, deltas);
  if (placement_.workers > 1 && (averaging_ == Averaging::gossip || config_.drop_probability > 0))
    report.consensus_distance = consensus_distance(pieces, updated);
  return report;
}

void Diloco::distribute(MasterWeights& weights, int fragment, const std::vector<float>& updated) {
  const std::vector<ElementRange>& pieces = pieces_[static_cast<std::size_t>(fragment)];
  if (!placement_.gather_over_dp) {
    if (!pieces.empty())
      weights.write_master_weights({pieces.front().begin, pieces.back().end}, updated.data());
    return;
  }
  // Every dp rank's share of the fragment, in rank order: together the fragment's elements.
  Communicator& dp = *placement_.dp;
  const std::size_t width = placement_.share.size();
  const ElementRange whole = fragment_ranges_[static_cast<std::size_t>(fragment)];
  std::vector<std::size_t> counts;
  for (int r = 0; r < dp.size(); ++r) {
    const std::size_t begin = static_cast<std::size_t>(r) * width;
    counts.push_back(intersect(whole, {begin, begin + width}).size());
  }
  STRATA_CHECK(counts[static_cast<std::size_t>(dp.rank())] == updated.size(),
               "DiLoCo: the share's part of fragment ", fragment, " is not where expected");
  std::vector<float> gathered(whole.size());
  dp.all_gather_v(updated.data(), gathered.data(), counts);
  if (!whole.empty()) weights.write_master_weights(whole, gathered.data());
}

double Diloco::outer_gradient_norm(const std::vector<ElementRange>& pieces,
                                   const std::vector<std::vector<float>>& deltas) const {
  double sum = 0;
  for (std::size_t p = 0; p < pieces.size(); ++p)
    for (const ElementRange& c : placement_.counted) {
      const ElementRange part = intersect(pieces[p], c);
      const float* d = deltas[p].data() + (part.begin - pieces[p].begin);
      for (std::size_t i = 0; i < part.size(); ++i) sum += static_cast<double>(d[i]) * d[i];
    }
  placement_.worker_group->all_reduce_sum(&sum, 1);
  return std::sqrt(sum);
}

double Diloco::consensus_distance(const std::vector<ElementRange>& pieces,
                                  const std::vector<std::vector<float>>& values) const {
  // Σ over this rank's counted elements of (θ_w − θ̄)² and θ̄², summed over the worker's ranks;
  // then each worker's distance, averaged over workers.
  const double k = placement_.workers;
  double sums[2] = {0, 0};
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    std::vector<double> mean(values[p].begin(), values[p].end());
    placement_.metrics->all_reduce_sum(mean.data(), mean.size());
    for (const ElementRange& c : placement_.counted) {
      const ElementRange part = intersect(pieces[p], c);
      const std::size_t at = part.begin - pieces[p].begin;
      for (std::size_t i = 0; i < part.size(); ++i) {
        const double m = mean[at + i] / k, d = values[p][at + i] - m;
        sums[0] += d * d;
        sums[1] += m * m;
      }
    }
  }
  placement_.worker_group->all_reduce_sum(sums, 2);
  double distance = sums[1] > 0 ? std::sqrt(sums[0]) / std::sqrt(sums[1]) : 0.0;
  placement_.metrics->all_reduce_sum(&distance, 1);
  return distance / k;
}

std::vector<StateBuffer> Diloco::state(const std::string& prefix) const {
  std::vector<StateBuffer> buffers{
      {prefix + "outer/anchor", placement_.share, optimizer_.anchor()},
      {prefix + "outer/momentum", placement_.share, optimizer_.momentum()}};
  // Named by the settings, not by the residual's size: every rank lists the same buffers, an
  // empty share's (a logical replica's other ranks, logical_replica.h) included.
  if (config_.error_feedback && compression_ != OuterCompression::none)
    buffers.push_back({prefix + "outer/residual", placement_.share, residual_});
  return buffers;
}

void Diloco::set_state(const std::vector<StateBuffer>& buffers, const std::string& prefix) {
  for (const StateBuffer& b : buffers) {
    std::vector<float>* target = b.name == prefix + "outer/anchor"     ? &optimizer_.anchor()
                                 : b.name == prefix + "outer/momentum" ? &optimizer_.momentum()
                                 : b.name == prefix + "outer/residual" ? &residual_
                                                                       : nullptr;
    if (target == nullptr) continue;
    STRATA_CHECK(b.range == placement_.share && b.values.size() == target->size(),
                 "DiLoCo state buffer '", b.name, "' does not fit this rank's share");
    *target = b.values;
  }
}

}  // namespace strata
