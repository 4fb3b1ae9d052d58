// Trainer::State (trainer_state.h): the run's state, fresh (the seed's parameters, or the weights
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

std::vector<StateBuffer> Trainer::State::named_state() {
  std::vector<StateBuffer> buffers = backend->state();
  for (StateBuffer& b : buffers) b.name = state_prefix + b.name;
  if (diloco)
    for (StateBuffer& b : outer_state()) buffers.push_back(std::move(b));
  return buffers;
}

void Trainer::State::set_named_state(std::vector<StateBuffer> buffers) {
  std::vector<StateBuffer> backend_buffers, outer;
  for (StateBuffer& b : buffers) {
    if (b.name.starts_with(state_prefix + "outer/")) {
      outer.push_back(std::move(b));
    } else {
      b.name = b.name.substr(state_prefix.size());
      backend_buffers.push_back(std::move(b));
    }
  }
  if (diloco) set_outer_state(std::move(outer));
  backend->set_state(backend_buffers);
}

std::vector<StateBuffer> Trainer::State::outer_state() {
  if (!logical) return diloco->state(state_prefix);
  return logical->to_layout(diloco->state(state_prefix), share);
}

void Trainer::State::set_outer_state(std::vector<StateBuffer> buffers) {
  if (logical) buffers = logical->to_logical(std::move(buffers), share);
  diloco->set_state(buffers, state_prefix);
}

void Trainer::State::start_diloco() {
  if (!logical) return diloco->start(*backend);
  logical->pull(*backend);
  if (logical->leads()) diloco->start(*logical);
}

void Trainer::State::resume_diloco(std::int64_t step) {
  if (!logical) return diloco->resume(*backend, step);
  logical->pull(*backend);
  if (logical->leads()) diloco->resume(*logical, step);
}

void Trainer::State::load_state(const TrainerOptions& options) {
  const std::optional<std::string>& resume_from = options.resume_from;
  const std::string ckpt_dir = config.checkpoint_directory();
  if (!resume_from) {
    // Every DiLoCo worker starts from the same parameters (the --init checkpoint's, or those of
    // the run's seed), and DiLoCo's anchor is them: start() is given the parameters set here.
    std::vector<StateBuffer> buffers = backend->state();
    StateBuffer& params = buffers.at(0);
    if (options.init_from)
      init_step = read_init_weights(*options.init_from, params);
    else
      initialize_gpt_parameters(backend->layout(), shape, config.run.seed, params.values.data(),
                                params.range);
    backend->set_state(buffers);
    if (diloco) start_diloco();
    if (options.init_from && is_logger())
      std::cout << "initialised from " << *options.init_from << " (step " << *init_step
                << " of its run)\n";
    return;
  }
  std::vector<StateBuffer> buffers = named_state();
  const std::string path = choose_resume_checkpoint(*resume_from, ckpt_dir, world);
  check_resumable(path, config.model, groups.workers(), config.optimizer.name);
  const CheckpointMeta meta = read_checkpoint(path, backend->layout(), buffers);
  set_named_state(std::move(buffers));
  if (diloco) resume_diloco(meta.state.step);
  const CheckpointState& mine =
      groups.worker_index() == 0
          ? meta.state
          : meta.worker_states.at(static_cast<std::size_t>(groups.worker_index() - 1));
  progress.step = meta.state.step;
  progress.data_position = meta.state.data_position;
  progress.optimizer_steps = mine.adam_steps;
  scaler.restore(mine.loss_scale, mine.loss_scale_clean_steps);
  last_checkpoint_step = progress.step;
  if (progress.step > config.train.steps)
    fail("--resume: checkpoint '", path, "' is at step ", progress.step, ", past train.steps (",
         config.train.steps, ")");
  if (meta.state.seed != config.run.seed && is_logger())
    std::cerr << "warning: run.seed " << config.run.seed << " differs from the checkpoint's "
              << meta.state.seed << "; the data order changes from here\n";
  // Another tokenizer would give the same ids other meanings: never a silent change.
  if (!meta.tokenizer_model.empty() && !tokenizer_model.empty() &&
      meta.tokenizer_model != tokenizer_model)
    fail("--resume: data.tokenizer '", config.data.tokenizer,
         "' is not the tokenizer of checkpoint '", path, "' (its model bytes differ)");
  if (is_logger()) warn_changed_keys(meta.config_yaml, path);
  if (is_logger()) std::cout << "resumed from " << path << " at step " << progress.step << "\n";
}

std::int64_t Trainer::State::read_init_weights(const std::string& path, StateBuffer& params) {
  // "model" without this worker's prefix: a DiLoCo checkpoint's first worker's weights.
  std::vector<StateBuffer> weights{{"model", params.range, {}}};
  CheckpointMeta meta;
  try {
    if (const std::optional<ConfigChange> change = checkpoint_model_difference(path, config.model))
      fail(change->key, " is ", change->before, " in the checkpoint but ", change->after,
           " in this run (set model: in the config to match)");
    meta = read_checkpoint(path, backend->layout(), weights);
  } catch (const CollectiveError&) {
    throw;
  } catch (const Error& e) {
    fail("--init ", path, ": ", e.what());
  }
  // Another tokenizer would give the ids the weights learned other meanings.
  if (!meta.tokenizer_model.empty() && !tokenizer_model.empty() &&
      meta.tokenizer_model != tokenizer_model)
    fail("--init ", path, ": data.tokenizer '", config.data.tokenizer,
         "' is not the checkpoint's tokenizer (its model bytes differ)");
  params.values = std::move(weights.front().values);
  return meta.state.step;
}

void Trainer::State::warn_changed_keys(const std::string& saved_yaml,
                                       const std::string& path) const {
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
      std::cerr << "; the learning-rate schedule changes from step " << progress.step;
    if (change.key == "data.train")  // the samples are a function of data.train (mixture.h)
      std::cerr << "; the data order changes from step " << progress.step;
    std::cerr << "\n";
  }
}

void Trainer::State::save_checkpoint() {
  if (last_checkpoint_step == progress.step) return;
  CheckpointMeta meta{
      config_to_yaml(config), checkpoint_state(), tokenizer_model, {}, data.without_tokenizer()};
  if (diloco) {  // every worker's counters reach the first (uncounted: metrics' duplicate)
    std::vector<CheckpointState> all(static_cast<std::size_t>(groups.workers()));
    groups.outer_metrics().all_gather(reinterpret_cast<const std::uint8_t*>(&meta.state),
                                      reinterpret_cast<std::uint8_t*>(all.data()),
                                      sizeof(CheckpointState));
    meta.worker_states.assign(all.begin() + 1, all.end());
  }
  const std::string path =
      write_checkpoint(config.checkpoint_directory(), checkpoint_writer, meta, named_state());
  if (is_logger()) {
    prune_checkpoints(config.checkpoint_directory(), config.checkpoint.keep);
    std::cout << "checkpoint " << path << "\n";
  }
  world.barrier();
  last_checkpoint_step = progress.step;
}

CheckpointState Trainer::State::checkpoint_state() const {
  return CheckpointState{
      progress.step,  progress.data_position,   config.run.seed,
      scaler.scale(), progress.optimizer_steps, scaler.dynamic() ? scaler.clean_steps() : -1};
}

}  // namespace strata
