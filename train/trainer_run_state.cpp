// RunCheckpoints (trainer_state.h): the run's state, fresh (the seed's parameters, or the weights
// of an --init checkpoint) or from a checkpoint, and the checkpoints it writes.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "train/checkpoint/checkpoint_verify.h"
#include "train/stop_signal.h"
#include "train/trainer_state.h"

namespace strata {

RunCheckpoints::RunCheckpoints(RunCore& core, RunOuter& outer)
    : core_(core),
      outer_(outer),
      writer_{&core.backend->layout(), core.shape, core.checkpoint_writes, &core.world, {}} {
  if (!outer.enabled()) return;
  // Every worker's buffers are datasets of the checkpoint (those of per-tensor buffers are created
  // by their writers).
  std::vector<StateDatasets> datasets;
  const std::size_t prefix = outer.state_prefix().size();
  for (const StateBuffer& b : named_state())
    if (!b.per_tensor) datasets.push_back({b.name.substr(prefix), b.stored});
  writer_.datasets = every_workers_datasets(datasets, core.groups.workers());
}

std::vector<StateBuffer> RunCheckpoints::named_state() {
  std::vector<StateBuffer> buffers = core_.backend->state();
  for (StateBuffer& b : buffers) b.name = outer_.state_prefix() + b.name;
  if (outer_.enabled())
    for (StateBuffer& b : outer_.outer_state()) buffers.push_back(std::move(b));
  return buffers;
}

void RunCheckpoints::set_named_state(std::vector<StateBuffer> buffers) {
  const std::string& prefix = outer_.state_prefix();
  std::vector<StateBuffer> backend_buffers, outer;
  for (StateBuffer& b : buffers) {
    if (b.name.starts_with(prefix + "outer/")) {
      outer.push_back(std::move(b));
    } else {
      b.name = b.name.substr(prefix.size());
      backend_buffers.push_back(std::move(b));
    }
  }
  if (outer_.enabled()) outer_.set_outer_state(std::move(outer));
  core_.backend->set_state(backend_buffers);
}

void RunCheckpoints::load(const TrainerOptions& options) {
  const Config& config = core_.config;
  TrainingProgress& progress = core_.progress;
  const std::optional<std::string>& resume_from = options.resume_from;
  const std::string ckpt_dir = config.checkpoint_directory();
  if (!resume_from) {
    // Every DiLoCo worker starts from the same parameters (the --init checkpoint's, or those of
    // the run's seed), and DiLoCo's anchor is them: start() is given the parameters set here.
    std::vector<StateBuffer> buffers = core_.backend->state();
    StateBuffer& params = buffers.at(0);
    if (options.init_from)
      init_step_ = read_init_weights(*options.init_from, params);
    else
      initialize_gpt_parameters(core_.backend->layout(), core_.shape, config.run.seed,
                                params.values.data(), params.range);
    core_.backend->set_state(buffers);
    if (outer_.enabled()) outer_.start();
    if (options.init_from && core_.is_logger())
      std::cout << "initialised from " << *options.init_from << " (step " << *init_step_
                << " of its run)\n";
    return;
  }
  std::vector<StateBuffer> buffers = named_state();
  const std::string path = choose_resume_checkpoint(*resume_from, ckpt_dir, core_.world);
  check_resumable(path, config.model, core_.groups.workers(), config.optimizer.name);
  const CheckpointMeta meta = read_checkpoint(path, core_.backend->layout(), buffers);
  set_named_state(std::move(buffers));
  if (outer_.enabled()) outer_.resume(meta.state.step);
  const CheckpointState& mine =
      core_.groups.worker_index() == 0
          ? meta.state
          : meta.worker_states.at(static_cast<std::size_t>(core_.groups.worker_index() - 1));
  progress.step = meta.state.step;
  progress.data_position = meta.state.data_position;
  progress.optimizer_steps = mine.adam_steps;
  core_.scaler.restore(mine.loss_scale, mine.loss_scale_clean_steps);
  last_step_ = progress.step;
  if (progress.step > config.train.steps)
    fail("--resume: checkpoint '", path, "' is at step ", progress.step, ", past train.steps (",
         config.train.steps, ")");
  if (meta.state.seed != config.run.seed && core_.is_logger())
    std::cerr << "warning: run.seed " << config.run.seed << " differs from the checkpoint's "
              << meta.state.seed << "; the data order changes from here\n";
  // Another tokenizer would give the same ids other meanings: never a silent change.
  if (!meta.tokenizer_model.empty() && !core_.tokenizer_model.empty() &&
      meta.tokenizer_model != core_.tokenizer_model)
    fail("--resume: data.tokenizer '", config.data.tokenizer,
         "' is not the tokenizer of checkpoint '", path, "' (its model bytes differ)");
  if (core_.is_logger()) warn_changed_keys(meta.config_yaml, path);
  if (core_.is_logger())
    std::cout << "resumed from " << path << " at step " << progress.step << "\n";
}

std::int64_t RunCheckpoints::read_init_weights(const std::string& path, StateBuffer& params) {
  const Config& config = core_.config;
  // "model" without this worker's prefix: a DiLoCo checkpoint's first worker's weights.
  std::vector<StateBuffer> weights{{"model", params.range, {}}};
  CheckpointMeta meta;
  try {
    if (const std::optional<ConfigChange> change = checkpoint_model_difference(path, config.model))
      fail(change->key, " is ", change->before, " in the checkpoint but ", change->after,
           " in this run (set model: in the config to match)");
    meta = read_checkpoint(path, core_.backend->layout(), weights);
  } catch (const CollectiveError&) {
    throw;
  } catch (const Error& e) {
    fail("--init ", path, ": ", e.what());
  }
  // Another tokenizer would give the ids the weights learned other meanings.
  if (!meta.tokenizer_model.empty() && !core_.tokenizer_model.empty() &&
      meta.tokenizer_model != core_.tokenizer_model)
    fail("--init ", path, ": data.tokenizer '", config.data.tokenizer,
         "' is not the checkpoint's tokenizer (its model bytes differ)");
  params.values = std::move(weights.front().values);
  return meta.state.step;
}

void RunCheckpoints::warn_changed_keys(const std::string& saved_yaml,
                                       const std::string& path) const {
  const Config& config = core_.config;
  Config saved;
  try {
    saved = parse_config(saved_yaml, path + " (config attribute)");
  } catch (const Error&) {
    return;  // a config this version cannot read: nothing to compare
  }
  for (const ConfigChange& change : config_changes(saved, config)) {
    // run.seed has a warning of its own; train.stop_after says when this invocation stops.
    if (change.key == "run.seed" || change.key == "train.stop_after") continue;
    // An elastic worker's place in its group is chosen anew at every start.
    if (change.key == "diloco.slot" || change.key == "diloco.min_workers" ||
        change.key == "diloco.timeout" || change.key == "diloco.interface")
      continue;
    std::cerr << "warning: --resume: " << change.key << " is " << change.after << ", "
              << change.before << " in the checkpoint's run";
    if (change.key == "train.steps" || change.key == "optimizer.lr" ||
        change.key == "optimizer.min_lr" || change.key == "optimizer.warmup_steps" ||
        change.key == "optimizer.schedule")
      std::cerr << "; the learning-rate schedule changes from step " << core_.progress.step;
    if (change.key == "data.train")  // the samples are a function of data.train (mixture.h)
      std::cerr << "; the data order changes from step " << core_.progress.step;
    std::cerr << "\n";
  }
}

void RunCheckpoints::save() {
  const Config& config = core_.config;
  const TrainingProgress& progress = core_.progress;
  if (last_step_ == progress.step) return;
  CheckpointMeta meta{config_to_yaml(config),
                      checkpoint_state(),
                      core_.tokenizer_model,
                      {},
                      core_.data.without_tokenizer()};
  if (outer_
          .enabled()) {  // every worker's counters reach the first (uncounted: metrics' duplicate)
    std::vector<CheckpointState> all(static_cast<std::size_t>(core_.groups.workers()));
    core_.groups.outer_metrics().all_gather(reinterpret_cast<const std::uint8_t*>(&meta.state),
                                            reinterpret_cast<std::uint8_t*>(all.data()),
                                            sizeof(CheckpointState));
    meta.worker_states.assign(all.begin() + 1, all.end());
  }
  const std::string path =
      write_checkpoint(config.checkpoint_directory(), writer_, meta, named_state());
  if (core_.is_logger()) {
    prune_checkpoints(config.checkpoint_directory(), config.checkpoint.keep);
    std::cout << "checkpoint " << path << "\n";
  }
  core_.world.barrier();
  last_step_ = progress.step;
}

CheckpointState RunCheckpoints::checkpoint_state() const {
  const TrainingProgress& progress = core_.progress;
  const LossScaler& scaler = core_.scaler;
  return CheckpointState{
      progress.step,  progress.data_position,   core_.config.run.seed,
      scaler.scale(), progress.optimizer_steps, scaler.dynamic() ? scaler.clean_steps() : -1};
}

}  // namespace strata
