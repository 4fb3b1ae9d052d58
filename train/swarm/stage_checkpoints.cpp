#include "train/swarm/stage_checkpoints.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_verify.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string stages_text(const std::vector<int>& stages) {
  std::string text = "[";
  for (std::size_t i = 0; i < stages.size(); ++i)
    text += (i ? ", " : "") + std::to_string(stages[i]);
  return text + "]";
}

// The config of checkpoint `path`.
Config checkpoint_config(const std::string& path) {
  return parse_config(read_checkpoint_config(path), path + " (config attribute)");
}

// The rest of stage `stage`'s checkpoint `path` (no tensor read): state, config, tokenizer.
CheckpointMeta stage_meta(const std::string& path, int stage) {
  const Config config = checkpoint_config(path);
  if (stage >= static_cast<int>(config.swarm.stages.size()))
    fail("checkpoint '", path, "' says it is stage ", stage, " of a swarm of ",
         config.swarm.stages.size());
  const ParameterLayout layout = ParameterLayout::for_partition(
      gpt_shape_of(config.model), swarm_stage_partition(config, stage));
  std::vector<StateBuffer> none;
  return read_checkpoint(path, layout, none);
}

// The stage checkpoints of `input` (a file, a run directory or its checkpoints/): (stage, step,
// path) of each.
struct StageFile {
  int stage = 0;
  std::int64_t step = 0;
  std::string path;
};
std::vector<StageFile> stage_files(const std::string& input) {
  std::vector<StageFile> files;
  if (fs::is_regular_file(input)) {
    const std::optional<int> stage = read_checkpoint_swarm_stage(input);
    if (!stage) fail("'", input, "' is a whole model's checkpoint, not a swarm stage's");
    files.push_back({*stage, stage_meta(input, *stage).state.step, input});
    return files;
  }
  if (!fs::is_directory(input)) fail("'", input, "' is neither a checkpoint nor a directory");
  const fs::path dir = fs::is_directory(fs::path(input) / "checkpoints")
                           ? fs::path(input) / "checkpoints"
                           : fs::path(input);
  for (const auto& [step, path] : list_checkpoints(dir.string()))
    if (const std::optional<int> stage = read_checkpoint_swarm_stage(path))
      files.push_back({*stage, step, path});
  return files;
}

}  // namespace

StageCheckpoints::StageCheckpoints(const Config& config, std::string tokenizer_model,
                                   bool without_tokenizer)
    : config_(config),
      tokenizer_model_(std::move(tokenizer_model)),
      without_tokenizer_(without_tokenizer) {}

void StageCheckpoints::after_step(SwarmStage& stage, const StageStep& step) {
  if (step.joined) return;
  const int every = config_.checkpoint.every;
  const int stop_after = config_.train.stop_after;
  const int last = stop_after > 0 ? std::min(stop_after, config_.train.steps) : config_.train.steps;
  if ((every > 0 && step.step % every == 0) || step.step >= last) save(stage);
}

void StageCheckpoints::save(SwarmStage& stage) {
  const std::int64_t step = stage.steps_done();
  if ((stage.index() == saved_stage_ && step == saved_step_) || step == 0) return;
  TrainingBackend& backend = stage.backend();
  const ParameterLayout& layout = backend.layout();
  const ModelPartition partition = swarm_stage_partition(config_, stage.index());
  const CheckpointWriter writer{&layout,
                                gpt_shape_of(config_.model),
                                checkpoint_write_ranges(layout, partition, {0, layout.total()}),
                                nullptr,
                                {}};
  CheckpointMeta meta;
  meta.config_yaml = config_to_yaml(config_);
  meta.state.step = step;
  meta.state.data_position = step * swarm_target_batch(config_);
  meta.state.seed = config_.run.seed;
  meta.state.adam_steps = stage.optimizer_steps();
  meta.tokenizer_model = tokenizer_model_;
  meta.without_tokenizer = without_tokenizer_;
  meta.swarm_stage = stage.index();
  const std::string directory = config_.checkpoint_directory();
  const std::string path = write_checkpoint(directory, writer, meta, backend.state());
  prune_checkpoints(directory, config_.checkpoint.keep);
  saved_stage_ = stage.index();
  saved_step_ = step;
  std::printf("stage %d: checkpoint %s\n", stage.index(), path.c_str());
  std::fflush(stdout);
}

StageResume choose_stage_resume(const Config& config, const std::string& requested,
                                MpiCommunicator& world) {
  StageResume r;
  r.path = choose_resume_checkpoint(requested, config.checkpoint_directory(), world);
  r.stage = config.swarm.stage;
  if (const std::optional<int> stage = read_checkpoint_swarm_stage(r.path)) {
    if (config.swarm.stage >= 0 && config.swarm.stage != *stage)
      fail("--resume: checkpoint '", r.path, "' is stage ", *stage, "'s, but swarm.stage is ",
           config.swarm.stage);
    r.stage = *stage;
  }
  return r;
}

std::int64_t load_stage_checkpoint(const Config& config, SwarmStage& stage,
                                   const std::string& path) {
  check_resumable(path, config.model, 1, config.optimizer.name);
  if (read_checkpoint_swarm_stage(path)) {
    const Config saved = checkpoint_config(path);
    if (saved.swarm.stages != config.swarm.stages)
      fail("--resume: checkpoint '", path, "' is a stage of swarm.stages ",
           stages_text(saved.swarm.stages), ", this peer's are ", stages_text(config.swarm.stages));
  }
  TrainingBackend& backend = stage.backend();
  std::vector<StateBuffer> buffers = backend.state();
  const CheckpointMeta meta = read_checkpoint(path, backend.layout(), buffers);
  if (meta.state.step > config.train.steps)
    fail("--resume: checkpoint '", path, "' is at step ", meta.state.step, ", past train.steps (",
         config.train.steps, ")");
  backend.set_state(buffers);
  backend.zero_gradients();
  stage.set_counts(meta.state.step, meta.state.adam_steps);
  return meta.state.step;
}

std::string assemble_swarm_checkpoint(const std::vector<std::string>& inputs,
                                      const std::string& out_dir, std::ostream& report) {
  std::map<int, StageFile> newest;
  for (const std::string& input : inputs)
    for (const StageFile& file : stage_files(input)) {
      const auto [at, fresh] = newest.emplace(file.stage, file);
      if (!fresh && file.step > at->second.step) at->second = file;
    }
  if (newest.empty()) fail("no swarm stage checkpoint among the inputs");
  const Config config = checkpoint_config(newest.begin()->second.path);
  const std::size_t stages = config.swarm.stages.size();
  std::vector<std::string> parts;
  std::vector<CheckpointMeta> metas;
  for (std::size_t k = 0; k < stages; ++k) {
    const auto at = newest.find(static_cast<int>(k));
    if (at == newest.end())
      fail(
          "no checkpoint of stage ", k, " of ", stages, " among the inputs (stages found:",
          [&] {
            std::string found;
            for (const auto& [stage, file] : newest) found += " " + std::to_string(stage);
            return found;
          }(),
          ")");
    const Config theirs = checkpoint_config(at->second.path);
    if (!(theirs.model == config.model) || theirs.swarm.stages != config.swarm.stages)
      fail("'", at->second.path, "' is of another model or swarm.stages than '",
           newest.begin()->second.path, "'");
    parts.push_back(at->second.path);
    metas.push_back(stage_meta(at->second.path, static_cast<int>(k)));
    report << "stage " << k << ": step " << metas.back().state.step << " from " << parts.back()
           << "\n";
  }
  if (newest.size() > stages)
    fail("checkpoints of stage ", newest.rbegin()->first, " found, past the ", stages,
         " stages of '", newest.begin()->second.path, "'");
  // The whole checkpoint's counts are the least advanced stage's; the tokenizer is the first
  // stage's (the peers that read the data).
  const auto least = std::min_element(
      metas.begin(), metas.end(),
      [](const CheckpointMeta& a, const CheckpointMeta& b) { return a.state.step < b.state.step; });
  CheckpointMeta meta = *least;
  meta.tokenizer_model = metas.front().tokenizer_model;
  meta.without_tokenizer = metas.front().without_tokenizer;
  meta.config_yaml = metas.front().config_yaml;
  meta.swarm_stage = -1;
  const std::string path =
      write_merged_checkpoint(out_dir, gpt_shape_of(config.model), meta, parts);
  report << "wrote " << path << " (step " << meta.state.step << ", the least of the stages')\n";
  return path;
}

}  // namespace strata
