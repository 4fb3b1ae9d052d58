#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "model/core/error.h"
#include "parallel/elastic/gloo_communicator.h"
#include "train/diloco/outer_loop.h"

namespace strata {
namespace {

class ElasticLoop final : public OuterLoop {
 public:
  ElasticLoop(Diloco& diloco, ElasticWorker& worker, TrainingProgress& progress, int global_batch,
              const ProcessGroups& groups, MetricsWriter* metrics)
      : diloco_(diloco),
        worker_(worker),
        progress_(progress),
        global_batch_(global_batch),
        groups_(groups),
        metrics_(metrics) {}

  void start(TrainingBackend& backend) override {
    before_ = worker_.outer_stats();
    const std::optional<std::int64_t> newest = worker_.newest_sync();
    if (!newest) {
      worker_.wait_for_workers();
    } else if (*newest > progress_.step) {
      join(backend, *newest);
      report(0.0);  // no step of this worker's went into the sync it joined at
    }
  }
  void begin_inner_step() override { before_ = worker_.outer_stats(); }
  void end_inner_step(TrainingBackend& backend, std::int64_t step) override {
    if (diloco_.fragments_due(step).empty()) return;
    if (std::optional<std::vector<OuterSyncReport>> reports = run_sync(backend, step, rejoining_)) {
      syncs_ = std::move(*reports);
      return;
    }
    // Left out (late, or found silent): this worker's θ since the last sync is lost; it meets
    // the group at its next sync and goes on from there.
    if (metrics_ != nullptr)
      std::printf("slot %d was left out of the sync after step %lld; joining the next one\n",
                  worker_.slot(), static_cast<long long>(step));
    join(backend, step);
  }
  void report(double loss) override {
    if (!syncs_.empty())
      report_outer_syncs(syncs_, loss, worker_.outer_stats() - before_, groups_, metrics_);
    syncs_.clear();
  }

 private:
  // Joins the group at the first sync after `newest` that takes this worker.
  void join(TrainingBackend& backend, std::int64_t newest) {
    while (true) {
      const std::int64_t step = diloco_.next_sync_step(newest);
      if (std::optional<std::vector<OuterSyncReport>> reports = run_sync(backend, step, true)) {
        progress_.step = step;
        progress_.data_position = step * global_batch_;
        syncs_ = std::move(*reports);
        if (metrics_ != nullptr)
          std::printf("slot %d joined the group at step %lld\n", worker_.slot(),
                      static_cast<long long>(step));
        return;
      }
      newest = step;
    }
  }

  // The sync after `step` if this worker is among its members. A member lost during the
  // averaging (or before its Gloo groups connect) fails it on some ranks: then every member
  // discards its average and the sync is decided again without the lost one
  // (parallel/elastic/elastic_group.h), at most kMaxFailedAttempts times in a row with nobody lost.
  std::optional<std::vector<OuterSyncReport>> run_sync(TrainingBackend& backend, std::int64_t step,
                                                       bool joining) {
    constexpr int kMaxFailedAttempts = 3;
    const auto start = std::chrono::steady_clock::now();
    std::vector<int> lost;
    int unchanged_failures = 0;
    for (int attempt = 0;; ++attempt) {
      const SyncMembers m = worker_.sync(step, diloco_.previous_sync_step(step), joining, attempt);
      const int me = m.index_of(worker_.slot());
      if (me < 0) return std::nullopt;
      for (int slot : m.lost)
        if (std::find(lost.begin(), lost.end(), slot) == lost.end()) lost.push_back(slot);
      const int members = static_cast<int>(m.slots.size());
      std::string why = "could not connect to every member";
      bool averaged = worker_.connected();
      if (averaged) {
        diloco_.set_sync_group({&worker_.outer(), &worker_.metrics(), me, members, m.joining});
        try {
          diloco_.average_due(backend, step);
        } catch (const PeerLost& e) {
          averaged = false;
          why = e.what();
        }
      }
      const ElasticGroup::Outcome outcome = worker_.settle(m, averaged);
      if (outcome == ElasticGroup::Outcome::retry) {
        diloco_.discard_averaged();
        unchanged_failures = m.lost.empty() && attempt > 0 ? unchanged_failures + 1 : 1;
        if (unchanged_failures >= kMaxFailedAttempts)
          fail("diloco.join: the sync after step ", step, " failed ", unchanged_failures,
               " times in a row with every member alive (last: ", why, ")");
        if (metrics_ != nullptr)
          std::printf("slot %d: the sync after step %lld failed on a member (%s); meeting again\n",
                      worker_.slot(), static_cast<long long>(step),
                      averaged ? "another member's averaging failed" : why.c_str());
        continue;
      }
      std::vector<OuterSyncReport> reports = diloco_.apply_averaged(backend);
      const bool handover_failed = hand_state(backend, m);
      // A sync applied alone (or whose verdict the store could not give), or a handover that
      // failed: this worker joins the group again at the next one.
      rejoining_ =
          m.alone || outcome == ElasticGroup::Outcome::commit_and_rejoin || handover_failed;
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<int> joined;
      for (int i = 0; i < members; ++i)
        if (m.joining[static_cast<std::size_t>(i)])
          joined.push_back(m.slots[static_cast<std::size_t>(i)]);
      for (OuterSyncReport& r : reports) {
        r.wall_seconds = wall;
        r.member_slots = m.slots;
        r.joining_slots = joined;
        r.lost_slots = lost;
        r.attempts = attempt + 1;
      }
      return reports;
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
      diloco_.hand_state_to_joiners(backend, donor);
    } catch (const PeerLost& e) {
      handed = false;
      std::fprintf(stderr, "warning: the handover of the group's state failed (%s)\n", e.what());
    }
    const bool joiner = m.joining[static_cast<std::size_t>(m.index_of(worker_.slot()))] &&
                        m.index_of(worker_.slot()) != donor;
    return !worker_.all_ranks(handed) && joiner;
  }

  Diloco& diloco_;
  ElasticWorker& worker_;
  TrainingProgress& progress_;
  std::int64_t global_batch_;
  const ProcessGroups& groups_;
  MetricsWriter* metrics_;
  CommStats before_;
  std::vector<OuterSyncReport> syncs_;
  bool rejoining_ = false;  // the last sync was this worker's alone
};

}  // namespace

std::unique_ptr<OuterLoop> make_elastic_loop(Diloco& diloco, ElasticWorker& worker,
                                             TrainingProgress& progress, int global_batch,
                                             const ProcessGroups& groups, MetricsWriter* metrics) {
  return std::make_unique<ElasticLoop>(diloco, worker, progress, global_batch, groups, metrics);
}

}  // namespace strata
