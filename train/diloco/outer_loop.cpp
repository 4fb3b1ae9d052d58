#include "train/diloco/outer_loop.h"

#include <vector>

namespace strata {
namespace {

class DilocoLoop final : public OuterLoop {
 public:
  DilocoLoop(Diloco& diloco, const ProcessGroups& groups, MetricsWriter* metrics)
      : diloco_(diloco), groups_(groups), metrics_(metrics) {}

  void begin_inner_step() override {
    outer_before_ = groups_.outer().stats();
    diloco_.begin_inner_step();
  }
  void end_inner_step(TrainingBackend& backend, std::int64_t step) override {
    syncs_ = diloco_.after_inner_step(backend, step);
  }
  void report(double loss) override {
    if (!syncs_.empty())
      report_outer_syncs(syncs_, loss, groups_.outer().stats() - outer_before_, groups_, metrics_);
    syncs_.clear();
  }
  void finish(TrainingBackend& backend, double loss) override {
    outer_before_ = groups_.outer().stats();
    syncs_ = diloco_.finish(backend);
    report(loss);
  }

 private:
  Diloco& diloco_;
  const ProcessGroups& groups_;
  MetricsWriter* metrics_;
  CommStats outer_before_;
  std::vector<OuterSyncReport> syncs_;  // run by end_inner_step, not reported yet
};

}  // namespace

std::unique_ptr<OuterLoop> make_diloco_loop(Diloco& diloco, const ProcessGroups& groups,
                                            MetricsWriter* metrics) {
  return std::make_unique<DilocoLoop>(diloco, groups, metrics);
}

}  // namespace strata
