// RunOuter (trainer_state.h): DiLoCo's wiring around a run's inner steps: the Diloco object on
// this rank's backend (or, with diloco.layouts any, on the job's logical replica), its outer state
// in checkpoints, its start or resume, the outer loop, and an elastic worker's membership.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "train/trainer_state.h"

namespace strata {

RunOuter::RunOuter(RunCore& core, const MeshShape& mesh_shape)
    : core_(core), state_prefix_(diloco_state_prefix(core.groups.worker_index())) {
  if (core.config.diloco.elastic())
    elastic_ = std::make_unique<ElasticWorker>(core.config, mesh_shape, core.world);
}

void RunOuter::make_diloco(const BackendPlacement& placement) {
  const Config& config = core_.config;
  if (!config.diloco.enabled) return;
  TrainingBackend& backend = *core_.backend;
  const DilocoPlacement local =
      diloco_placement(core_.groups, placement, backend.layout(), core_.share);
  if (config.diloco.layouts == WorkerLayouts::any) {
    // The replica's weights: under ZeRO < 3 the whole layout, otherwise the share.
    const ElementRange held =
        local.gather_over_dp ? ElementRange{0, std::max(backend.layout().total(), core_.share.end)}
                             : core_.share;
    logical_ = std::make_unique<LogicalReplica>(backend.layout(), core_.shape,
                                                core_.checkpoint_writes, held, core_.world);
    diloco_ = std::make_unique<Diloco>(
        config.diloco, config.run.seed, logical_->logical_layout(), core_.shape,
        logical_diloco_placement(core_.groups, logical_->leads(), logical_->size()),
        config.optimizer, config.train.steps, core_.test_hooks);
  } else {
    diloco_ =
        std::make_unique<Diloco>(config.diloco, config.run.seed, backend.layout(), core_.shape,
                                 local, config.optimizer, config.train.steps, core_.test_hooks);
  }
}

std::vector<StateBuffer> RunOuter::outer_state() {
  if (!logical_) return diloco_->state(state_prefix_);
  return logical_->to_layout(diloco_->state(state_prefix_), core_.share);
}

void RunOuter::set_outer_state(std::vector<StateBuffer> buffers) {
  if (logical_) buffers = logical_->to_logical(std::move(buffers), core_.share);
  diloco_->set_state(buffers, state_prefix_);
}

void RunOuter::start() {
  if (!logical_) return diloco_->start(*core_.backend);
  logical_->pull(*core_.backend);
  if (logical_->leads()) diloco_->start(*logical_);
}

void RunOuter::resume(std::int64_t step) {
  if (!logical_) return diloco_->resume(*core_.backend, step);
  logical_->pull(*core_.backend);
  if (logical_->leads()) diloco_->resume(*logical_, step);
}

std::unique_ptr<OuterLoop> RunOuter::loop(MetricsWriter* metrics) {
  if (!diloco_) return std::make_unique<OuterLoop>();
  if (elastic_)
    return make_elastic_loop(*diloco_, *elastic_, logical_.get(), core_.progress,
                             core_.config.train.global_batch, core_.config.train.steps,
                             core_.groups, metrics);
  return make_diloco_loop(*diloco_, core_.groups, metrics);
}

int RunOuter::data_stride() const {
  return elastic_ ? core_.config.diloco.workers : core_.groups.workers();
}

int RunOuter::data_offset() const {
  return elastic_ ? elastic_->slot() : core_.groups.worker_index();
}

void RunOuter::leave(const std::string& why) {
  if (elastic_) elastic_->leave(why);
}

}  // namespace strata
