#include "train/outer_loop.h"

#include <vector>

namespace strata {
namespace {

class DilocoLoop final : public OuterLoop {
 public:
  DilocoLoop(Diloco& diloco, const WorkerGroups& workers, MpiCommunicator& world,
             MetricsWriter* metrics)
      : diloco_(diloco), workers_(workers), world_(world), metrics_(metrics) {}

  void begin_inner_step() override {
    outer_before_ = workers_.outer->stats();
    diloco_.begin_inner_step();
  }
  void end_inner_step(TrainingBackend& backend, std::int64_t step) override {
    syncs_ = diloco_.after_inner_step(backend, step);
  }
  void report(double loss) override {
    if (!syncs_.empty())
      report_outer_syncs(syncs_, loss, workers_.outer->stats() - outer_before_, workers_, world_,
                         metrics_);
    syncs_.clear();
  }
  void finish(TrainingBackend& backend, double loss) override {
    outer_before_ = workers_.outer->stats();
    syncs_ = diloco_.finish(backend);
    report(loss);
  }

 private:
  Diloco& diloco_;
  const WorkerGroups& workers_;
  MpiCommunicator& world_;
  MetricsWriter* metrics_;
  CommStats outer_before_;
  std::vector<OuterSyncReport> syncs_;  // run by end_inner_step, not reported yet
};

}  // namespace

std::unique_ptr<OuterLoop> make_diloco_loop(Diloco& diloco, const WorkerGroups& workers,
                                            MpiCommunicator& world, MetricsWriter* metrics) {
  return std::make_unique<DilocoLoop>(diloco, workers, world, metrics);
}

}  // namespace strata
