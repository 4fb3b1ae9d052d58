#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "model/core/error.h"
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

  // The sync after `step` if this worker is among its members.
  std::optional<std::vector<OuterSyncReport>> run_sync(TrainingBackend& backend, std::int64_t step,
                                                       bool joining) {
    const auto start = std::chrono::steady_clock::now();
    const SyncMembers m = worker_.sync(step, diloco_.previous_sync_step(step), joining);
    const int me = m.index_of(worker_.slot());
    if (me < 0) return std::nullopt;
    const int members = static_cast<int>(m.slots.size());
    diloco_.set_sync_group({&worker_.outer(), &worker_.metrics(), me, members, m.joining});
    std::vector<OuterSyncReport> reports = diloco_.after_inner_step(backend, step);
    std::vector<int> joined;
    int donor = -1;
    for (int i = 0; i < members; ++i) {
      const auto at = static_cast<std::size_t>(i);
      if (m.joining[at])
        joined.push_back(m.slots[at]);
      else if (donor < 0)
        donor = i;
    }
    // When every member joins (after a store outage each applied its outer step alone), the
    // first one's state becomes the group's.
    if (donor < 0) donor = 0;
    if (members > 1 && !joined.empty()) diloco_.hand_state_to_joiners(backend, donor);
    // A sync this worker applied alone: it joins the group again at the next one.
    rejoining_ = m.alone;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (OuterSyncReport& r : reports) {
      r.wall_seconds = wall;
      r.member_slots = m.slots;
      r.joining_slots = joined;
      r.lost_slots = m.lost;
    }
    return reports;
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
