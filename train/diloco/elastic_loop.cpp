#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "parallel/elastic/gloo_communicator.h"
#include "train/diloco/outer_loop.h"

namespace strata {
namespace {

class ElasticLoop final : public OuterLoop {
 public:
  ElasticLoop(Diloco& diloco, ElasticWorker& worker, LogicalReplica* logical,
              TrainingProgress& progress, int global_batch, std::int64_t total_steps,
              const ProcessGroups& groups, MetricsWriter* metrics)
      : diloco_(diloco),
        worker_(worker),
        logical_(logical),
        progress_(progress),
        global_batch_(global_batch),
        total_steps_(total_steps),
        groups_(groups),
        metrics_(metrics) {}

  bool start(TrainingBackend& backend) override {
    before_ = worker_.outer_stats();
    std::optional<std::int64_t> newest = worker_.newest_sync();
    bool behind = newest && *newest > progress_.step;
    // Resumed with overlap after a sync's step: the checkpoint holds θ from before that sync,
    // which the group has applied since (or retried without this worker): it joins instead.
    if (has_pending()) {
      if (leads()) diloco_.drop_pending();
      newest = std::max(newest.value_or(progress_.step), progress_.step);
      behind = true;
    }
    // The group has held its last sync: joining would train nothing and write, as this run's
    // result, weights that never met the group's.
    if (behind && diloco_.next_sync_step(*newest) > total_steps_) {
      if (metrics_ != nullptr)
        std::printf(
            "group '%s' has finished: its last sync was after step %lld and train.steps is %lld, "
            "so no sync is left to join (no step, evaluation or checkpoint)\n",
            worker_.group_name().c_str(), static_cast<long long>(*newest),
            static_cast<long long>(total_steps_));
      return false;
    }
    if (behind) {
      join(backend, *newest);
      report(0.0);  // no step of this worker's went into the sync it joined at
    } else if (!newest) {
      worker_.wait_for_workers();
    }
    return true;
  }
  void begin_inner_step() override {
    step_waited_ = 0;
    before_ = worker_.outer_stats();
    if (leads()) diloco_.begin_inner_step();
  }
  void end_inner_step(TrainingBackend& backend, std::int64_t step) override {
    if (in_flight_) {
      settle_in_flight(backend, step);
      if (progress_.step != step) return;  // left out of it: joined a later sync
    }
    if (diloco_.fragments_due(step).empty()) return;
    if (diloco_.overlaps() && !rejoining_) {
      if (start_in_flight(backend, step)) return;
    } else if (std::optional<std::vector<OuterSyncReport>> reports =
                   run_sync(backend, step, rejoining_)) {
      append(std::move(*reports));
      return;
    }
    left_out(backend, step);
  }
  double member_wait_seconds() const override { return step_waited_; }
  void report(double loss) override {
    if (!syncs_.empty())
      report_outer_syncs(syncs_, loss, worker_.outer_stats() - before_, groups_, metrics_);
    syncs_.clear();
  }
  void finish(TrainingBackend& backend, double loss) override {
    before_ = worker_.outer_stats();
    if (in_flight_) settle_in_flight(backend, progress_.step);
    report(loss);
  }

 private:
  // A sync whose averaging runs while the next inner step computes (diloco.overlap).
  struct InFlight {
    SyncMembers members;
    std::chrono::steady_clock::time_point start;
    double waited = 0;  // deciding its members
  };

  // worker_.sync, timed: the wait for the members goes to the sync's report (`waited`) and out of
  // the step's time.
  SyncMembers meet(std::int64_t step, bool joining, int attempt, double& waited) {
    const auto start = std::chrono::steady_clock::now();
    SyncMembers m = worker_.sync(step, diloco_.previous_sync_step(step), joining, attempt);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    waited += seconds;
    step_waited_ += seconds;
    return m;
  }

  void append(std::vector<OuterSyncReport> reports) {
    syncs_.insert(syncs_.end(), reports.begin(), reports.end());
  }

  // Left out (late, or found silent): this worker's θ since the last sync is lost; it meets the
  // group at its next sync and goes on from there.
  void left_out(TrainingBackend& backend, std::int64_t step) {
    if (metrics_ != nullptr)
      std::printf("slot %d was left out of the sync after step %lld; joining the next one\n",
                  worker_.slot(), static_cast<long long>(step));
    join(backend, step);
  }

  // Joins the group at the first sync after `newest` that takes this worker (synchronously: a
  // joining sync never overlaps a step).
  void join(TrainingBackend& backend, std::int64_t newest) {
    while (true) {
      const std::int64_t step = diloco_.next_sync_step(newest);
      if (std::optional<std::vector<OuterSyncReport>> reports = run_sync(backend, step, true)) {
        progress_.step = step;
        progress_.data_position = step * global_batch_;
        if (metrics_ != nullptr) say_joined(reports->front());
        append(std::move(*reports));
        return;
      }
      newest = step;
    }
  }

  // The join, and where its state came from when no member held the group's: every member of
  // the sync joined at it (all earlier members left), so no contributor could hand it over.
  void say_joined(const OuterSyncReport& sync) const {
    std::printf("slot %d joined the group at step %lld\n", worker_.slot(),
                static_cast<long long>(sync.step));
    if (sync.joining_slots.size() != sync.member_slots.size()) return;
    const int first = sync.member_slots.front();
    if (first == worker_.slot())
      std::printf(
          "slot %d: no member of the group held its state (every earlier member has left): this "
          "worker goes on %s from its own weights, at the group's step %lld\n",
          worker_.slot(), sync.member_slots.size() == 1 ? "alone" : "with the joiners",
          static_cast<long long>(sync.step));
    else
      std::printf(
          "slot %d: no member of the group held its state (every earlier member has left): this "
          "worker takes slot %d's own weights, at the group's step %lld\n",
          worker_.slot(), first, static_cast<long long>(sync.step));
  }

  // Overlap: decides the sync after `step` and prepares it; its averaging starts as the next
  // step begins. False when this worker is not a member (it joins the next sync instead).
  bool start_in_flight(TrainingBackend& backend, std::int64_t step) {
    const auto start = std::chrono::steady_clock::now();
    double waited = 0;
    const SyncMembers m = meet(step, false, 0, waited);
    const int me = m.index_of(worker_.slot());
    if (me < 0) return false;
    if (!worker_.connected()) {  // settled (and retried) now, without overlap
      prepare_due(backend, step);
      if (auto reports =
              settle(backend, m, false, "could not connect to every member", true, start, waited)) {
        append(std::move(*reports));
        return true;
      }
      if (leads()) diloco_.drop_pending();
      return false;
    }
    if (leads())
      diloco_.set_sync_group(
          {&worker_.outer(), &worker_.metrics(), me, static_cast<int>(m.slots.size()), m.joining});
    prepare_due(backend, step);
    in_flight_ = InFlight{m, start, waited};
    return true;
  }

  // Overlap, after the step that the averaging overlapped (`step`): waits for it, settles it
  // with the group and applies it, or joins the next sync when a retry left this worker out.
  void settle_in_flight(TrainingBackend& backend, std::int64_t step) {
    const InFlight flight = *in_flight_;
    in_flight_.reset();
    bool averaged = true;
    std::string why;
    try {
      if (leads()) diloco_.wait_pending();
    } catch (const PeerLost& e) {
      averaged = false;
      why = e.what();
    }
    if (auto reports =
            settle(backend, flight.members, averaged, why, true, flight.start, flight.waited)) {
      append(std::move(*reports));
      return;
    }
    if (leads()) diloco_.drop_pending();
    left_out(backend, step);
  }

  // The sync after `step`, synchronously, if this worker is among its members.
  std::optional<std::vector<OuterSyncReport>> run_sync(TrainingBackend& backend, std::int64_t step,
                                                       bool joining) {
    const auto start = std::chrono::steady_clock::now();
    double waited = 0;
    const SyncMembers m = meet(step, joining, 0, waited);
    if (m.index_of(worker_.slot()) < 0) return std::nullopt;
    std::string why;
    const bool averaged = average(backend, m, false, why);
    return settle(backend, m, averaged, why, false, start, waited);
  }

  // Averages the sync for members `m` (in_flight: the prepared sync again, from θ_s); false with
  // `why` when a member was lost on this rank, or its Gloo groups could not be made.
  bool average(TrainingBackend& backend, const SyncMembers& m, bool in_flight, std::string& why) {
    if (!worker_.connected()) {
      why = "could not connect to every member";
      return false;
    }
    if (!in_flight && logical_ != nullptr) logical_->pull(backend);
    if (!leads()) return true;
    diloco_.set_sync_group({&worker_.outer(), &worker_.metrics(), m.index_of(worker_.slot()),
                            static_cast<int>(m.slots.size()), m.joining});
    try {
      if (in_flight)
        diloco_.average_pending_again();
      else
        diloco_.average_due(weights(backend), m.step);
    } catch (const PeerLost& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  // Settles sync `m` after its averaging (`averaged` on this rank) and applies it; a member lost
  // during the averaging (or before its Gloo groups connect) fails it on some ranks: then every
  // member discards its average and the sync is decided again without the lost one
  // (parallel/elastic/elastic_group.h), at most kMaxFailedAttempts times in a row with nobody
  // lost. nullopt: a retry left this worker out. `in_flight`: the sync is Diloco's pending one.
  // `waited`: the seconds spent deciding its members so far.
  std::optional<std::vector<OuterSyncReport>> settle(TrainingBackend& backend, SyncMembers m,
                                                     bool averaged, std::string why, bool in_flight,
                                                     std::chrono::steady_clock::time_point start,
                                                     double waited) {
    constexpr int kMaxFailedAttempts = 3;
    const bool joining = m.joining[static_cast<std::size_t>(m.index_of(worker_.slot()))];
    std::vector<int> lost = m.lost;
    int unchanged_failures = 0;
    while (true) {
      const ElasticGroup::Outcome outcome = worker_.settle(m, averaged);
      if (outcome != ElasticGroup::Outcome::retry) {
        std::vector<OuterSyncReport> reports = apply(backend, in_flight);
        const bool handover_failed = hand_state(backend, m);
        // A sync applied alone (or whose verdict the store could not give), or a handover that
        // failed: this worker joins the group again at the next one.
        rejoining_ =
            m.alone || outcome == ElasticGroup::Outcome::commit_and_rejoin || handover_failed;
        describe(reports, m, lost, start, waited);
        return reports;
      }
      if (!in_flight && leads()) diloco_.discard_averaged();
      unchanged_failures = m.lost.empty() && m.attempt > 0 ? unchanged_failures + 1 : 1;
      if (unchanged_failures >= kMaxFailedAttempts)
        fail("diloco.join: the sync after step ", m.step, " failed ", unchanged_failures,
             " times in a row with every member alive (last: ", why, ")");
      if (metrics_ != nullptr)
        std::printf("slot %d: the sync after step %lld failed on a member (%s); meeting again\n",
                    worker_.slot(), static_cast<long long>(m.step),
                    averaged ? "another member's averaging failed" : why.c_str());
      m = meet(m.step, joining, m.attempt + 1, waited);
      if (m.index_of(worker_.slot()) < 0) return std::nullopt;
      for (int slot : m.lost)
        if (std::find(lost.begin(), lost.end(), slot) == lost.end()) lost.push_back(slot);
      averaged = average(backend, m, in_flight, why);
    }
  }

  void describe(std::vector<OuterSyncReport>& reports, const SyncMembers& m,
                const std::vector<int>& lost, std::chrono::steady_clock::time_point start,
                double waited) const {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<int> joined;
    for (std::size_t i = 0; i < m.slots.size(); ++i)
      if (m.joining[i]) joined.push_back(m.slots[i]);
    for (OuterSyncReport& r : reports) {
      r.wall_seconds = wall;
      r.wait_seconds = waited;
      r.member_slots = m.slots;
      r.joining_slots = joined;
      r.lost_slots = lost;
      r.attempts = m.attempt + 1;
      for (OuterSyncReport::LeftOut& out : r.left_out)
        out.member = m.slots.at(static_cast<std::size_t>(out.member));
    }
  }

  // After a sync with joiners: a contributor hands them the group's state. True for a joiner
  // whose handover failed on any of its ranks (the donor lost): it joins again at the next sync;
  // the others need nothing from it.
  bool hand_state(TrainingBackend& backend, const SyncMembers& m) {
    const int members = static_cast<int>(m.slots.size());
    int donor = -1;
    bool any_joiner = false;
    for (int i = 0; i < members; ++i) {
      if (m.joining[static_cast<std::size_t>(i)])
        any_joiner = true;
      else if (donor < 0)
        donor = i;
    }
    if (members < 2 || !any_joiner) return false;
    // When every member joins (after a store outage each applied its outer step alone), the
    // first one's state becomes the group's.
    if (donor < 0) donor = 0;
    bool handed = true;
    try {
      if (leads()) diloco_.hand_state_to_joiners(weights(backend), donor);
    } catch (const PeerLost& e) {
      handed = false;
      std::fprintf(stderr, "warning: the handover of the group's state failed (%s)\n", e.what());
    }
    const bool joiner = m.joining[static_cast<std::size_t>(m.index_of(worker_.slot()))] &&
                        m.index_of(worker_.slot()) != donor;
    const bool every_rank_handed = worker_.all_ranks(handed);
    // A joiner's rank 0 holds the group's anchor as its weights now: so does every rank.
    if (joiner && every_rank_handed && logical_ != nullptr) logical_->push(backend);
    return !every_rank_handed && joiner;
  }

  // With workers of any layout (logical_replica.h) rank 0 alone runs the outer step, on the
  // logical copy of the job's weights; otherwise every rank on its backend.
  bool leads() const { return logical_ == nullptr || logical_->leads(); }
  MasterWeights& weights(TrainingBackend& backend) {
    return logical_ != nullptr ? static_cast<MasterWeights&>(*logical_) : backend;
  }
  bool has_pending() {
    if (logical_ == nullptr) return diloco_.has_pending();
    return logical_->from_leader(leads() && diloco_.has_pending() ? 1 : 0) != 0;
  }
  // The sync due after `step`, prepared from θ_s (diloco.overlap).
  void prepare_due(TrainingBackend& backend, std::int64_t step) {
    if (logical_ != nullptr) logical_->pull(backend);
    if (leads()) diloco_.prepare_due(weights(backend), step);
  }
  // The averaged (or, in flight, the pending) sync applied to the weights. On the other ranks of
  // a logical replica: as many reports as rank 0's, for report_outer_syncs, which they join.
  std::vector<OuterSyncReport> apply(TrainingBackend& backend, bool in_flight) {
    if (logical_ == nullptr)
      return in_flight ? diloco_.apply_pending(backend) : diloco_.apply_averaged(backend);
    if (in_flight) logical_->pull(backend);  // θ_{s+1}: the overlapped step's progress is kept
    std::vector<OuterSyncReport> reports;
    if (leads())
      reports = in_flight ? diloco_.apply_pending(*logical_) : diloco_.apply_averaged(*logical_);
    logical_->push(backend);
    reports.resize(
        static_cast<std::size_t>(logical_->from_leader(static_cast<std::int64_t>(reports.size()))));
    return reports;
  }

  Diloco& diloco_;
  ElasticWorker& worker_;
  LogicalReplica* logical_;  // diloco.layouts any; null otherwise
  TrainingProgress& progress_;
  std::int64_t global_batch_;
  std::int64_t total_steps_;
  const ProcessGroups& groups_;
  MetricsWriter* metrics_;
  CommStats before_;
  std::vector<OuterSyncReport> syncs_;
  double step_waited_ = 0;  // this inner step's wait for members (member_wait_seconds)
  bool rejoining_ = false;  // the next sync joins (the last was this worker's alone)
  std::optional<InFlight> in_flight_;
};

}  // namespace

std::unique_ptr<OuterLoop> make_elastic_loop(Diloco& diloco, ElasticWorker& worker,
                                             LogicalReplica* logical, TrainingProgress& progress,
                                             int global_batch, std::int64_t total_steps,
                                             const ProcessGroups& groups, MetricsWriter* metrics) {
  return std::make_unique<ElasticLoop>(diloco, worker, logical, progress, global_batch, total_steps,
                                       groups, metrics);
}

}  // namespace strata
