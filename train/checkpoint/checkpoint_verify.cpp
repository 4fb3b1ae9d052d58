#include "train/checkpoint/checkpoint_verify.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "data/hdf5_handle.h"
#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_datasets.h"

namespace strata {
namespace fs = std::filesystem;
using checkpoint_detail::dataset_names_in;

namespace {

std::uint64_t stored_checksum(hid_t file, const std::string& path, const std::string& name) {
  H5Id dataset = open_dataset(file, name);
  if (!has_attribute(dataset.get(), "checksum"))
    fail("checkpoint '", path, "': '", name, "' has no checksum");
  return static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum"));
}

// Checks one dataset against its checksum; fp32 ones are handed to `visit`. Tensors (fp32, and the
// 8-bit optimizer's int8 and uint8 codes) carry the checksum of their values as fp32; other
// datasets (the tokenizer's bytes) one of their bytes.
void check_dataset(
    hid_t file, const std::string& path, const std::string& name, CheckpointFormat format,
    CheckpointSummary& summary,
    const std::function<void(const std::string&, const std::vector<float>&)>& visit) {
  const std::uint64_t expected = stored_checksum(file, path, name);
  H5T_class_t type_class;
  {
    H5Id dataset = open_dataset(file, name);
    type_class = dataset_type_class(dataset.get());
  }
  if (type_class == H5T_FLOAT || (type_class == H5T_INTEGER && !name.starts_with("/tokenizer/"))) {
    const std::vector<float> values = read_dataset_f32(file, name);
    // The whole tensor in logical order: logical index = flat index.
    TensorSlice whole;
    whole.mid = whole.mid_count = static_cast<std::int64_t>(values.size());
    if (checksum_slice(values.data(), whole, 0, whole.mid) != expected)
      fail("checkpoint '", path, "': tensor '", name, "' fails its checksum (file is damaged)");
    summary.tensors += 1;
    summary.values += static_cast<std::int64_t>(values.size());
    if (visit && type_class == H5T_FLOAT) visit(name, values);
  } else {
    const std::vector<std::uint8_t> bytes = read_dataset<std::uint8_t>(file, name);
    if (checksum_bytes(bytes.data(), bytes.size(), format) != expected)
      fail("checkpoint '", path, "': '", name, "' fails its checksum (file is damaged)");
  }
}

CheckpointSummary walk_checkpoint(
    const std::string& path,
    const std::function<void(const std::string&, const std::vector<float>&)>& visit,
    bool check_seal = true) {
  H5File file = open_checkpoint(path, check_seal);  // exists, matches its seal, of a known format
  const CheckpointFormat format = read_checkpoint_format(file.id(), path);
  CheckpointSummary summary;
  summary.format = format;
  if (!has_object(file.id(), "/state")) fail("checkpoint '", path, "' has no /state group");
  {
    H5Id state = open_group(file.id(), "/state");
    if (!has_attribute(state.get(), "step"))
      fail("checkpoint '", path, "': /state has no step attribute");
    summary.step = read_attribute_i64(state.get(), "step");
  }
  while (has_object(file.id(), "/state/worker_" + std::to_string(summary.workers)))
    ++summary.workers;
  const std::vector<std::string> names = dataset_names_in(file.id(), path);
  // A swarm stage's checkpoint holds its stage's tensors alone: the embedding on the first only.
  if (has_attribute(file.id(), "swarm_stage")) {
    if (std::none_of(names.begin(), names.end(),
                     [](const std::string& name) { return name.starts_with("/model/"); }))
      fail("checkpoint '", path, "' holds no tensor of its swarm stage");
  } else if (!has_object(file.id(), "/model/wte")) {
    fail("checkpoint '", path, "' has no tensor '/model/wte'");
  }
  for (const std::string& name : names)
    check_dataset(file.id(), path, name, format, summary, visit);
  return summary;
}

}  // namespace

CheckpointSummary verify_checkpoint(const std::string& path) { return walk_checkpoint(path, {}); }

std::string locate_checkpoint_damage(const std::string& path) {
  int channel[2];
  if (::pipe(channel) != 0) return "";
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(channel[0]);
    ::close(channel[1]);
    return "";
  }
  if (child == 0) {  // HDF5 may crash on what it reads here: this process alone goes down
    ::close(channel[0]);
    std::string finding;
    try {
      walk_checkpoint(path, {}, /*check_seal=*/false);
    } catch (const std::exception& e) {
      finding = e.what();
    }
    const ssize_t written = ::write(channel[1], finding.data(), finding.size());
    ::_exit(written == static_cast<ssize_t>(finding.size()) ? 0 : 1);
  }
  ::close(channel[1]);
  std::string finding;
  char buffer[4096];
  for (ssize_t n; (n = ::read(channel[0], buffer, sizeof buffer)) > 0;) finding.append(buffer, n);
  ::close(channel[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return "the damage is in HDF5's own structures (reading them crashed)";
  if (finding.empty())
    return "the damage is in HDF5's own structures (no tensor fails its checksum)";
  if (finding.find("fails its checksum") == std::string::npos)
    return "the damage is in HDF5's own structures (" + finding + ")";
  return finding;
}

void for_each_checkpoint_tensor(
    const std::string& path,
    const std::function<void(const std::string& name, const std::vector<float>& values)>& visit) {
  walk_checkpoint(path, visit);
}

std::optional<std::string> latest_intact_checkpoint(
    const std::string& directory,
    const std::function<void(const std::string& path, const std::string& reason)>& skipped) {
  const auto found = list_checkpoints(directory);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    try {
      verify_checkpoint(it->second);
      return it->second;
    } catch (const Error& e) {
      skipped(it->second, e.what());
    }
  }
  return std::nullopt;
}

std::vector<std::string> remove_abandoned_checkpoint_writes(const std::string& directory) {
  std::vector<std::string> removed;
  std::error_code error;
  if (!fs::is_directory(directory, error)) return removed;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    // write_checkpoint's temporary name: "." + step_<digits>.h5 + ".tmp" + pid.
    if (name.starts_with(".step_") && name.find(".h5.tmp") != std::string::npos &&
        entry.is_regular_file()) {
      fs::remove(entry.path(), error);
      if (!error) removed.push_back(name);
    }
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

namespace {
// Rank 0's text (a path or an error) to every rank of `world`.
std::string broadcast_text(Communicator& world, std::string text) {
  std::int64_t size = static_cast<std::int64_t>(text.size());
  world.broadcast(&size, sizeof(size), 0);
  text.resize(static_cast<std::size_t>(size));
  if (size > 0) world.broadcast(text.data(), text.size(), 0);
  return text;
}
}  // namespace

std::string choose_resume_checkpoint(const std::string& requested, const std::string& directory,
                                     Communicator& world) {
  std::string chosen, error;
  if (world.rank() == 0) {
    for (const std::string& name : remove_abandoned_checkpoint_writes(directory))
      std::cerr << "warning: removed '" << name
                << "', a checkpoint write that a stopped job left unfinished\n";
    chosen = requested;
    if (chosen.empty()) {
      int damaged = 0;
      const auto latest = latest_intact_checkpoint(
          directory, [&](const std::string& path, const std::string& reason) {
            ++damaged;
            std::cerr << "warning: skipping checkpoint '" << path << "': " << reason
                      << "; trying the one before it\n";
          });
      if (latest)
        chosen = *latest;
      else if (damaged > 0)
        error = "--resume: no intact checkpoint in '" + directory + "' (" +
                std::to_string(damaged) + " damaged)";
      else
        error = "--resume: no checkpoint to resume in '" + directory + "'";
    }
  }
  std::int64_t failed = error.empty() ? 0 : 1;
  world.broadcast(&failed, sizeof(failed), 0);
  if (failed) fail(broadcast_text(world, error));
  return broadcast_text(world, chosen);
}

namespace {
std::string model_text(const ModelConfig& m) {
  return "n_layer " + std::to_string(m.n_layer) + ", n_head " + std::to_string(m.n_head) +
         ", d_model " + std::to_string(m.d_model) + ", seq_len " + std::to_string(m.seq_len) +
         ", vocab_size " + std::to_string(m.vocab_size);
}
}  // namespace

void check_resumable(const std::string& path, const ModelConfig& model, int workers,
                     OptimizerName optimizer) {
  const int checkpoint_workers = read_checkpoint_workers(path);
  if (checkpoint_workers != workers)
    fail("--resume: checkpoint '", path, "' holds ", checkpoint_workers,
         " DiLoCo worker(s) but this run has ", workers,
         " (diloco.workers; resume with the same number)");
  ModelConfig saved;
  OptimizerName saved_optimizer;
  try {
    const Config config = parse_config(read_checkpoint_config(path), path + " (config attribute)");
    saved = config.model;
    saved_optimizer = config.optimizer.name;
  } catch (const Error&) {
    return;  // a config this version cannot read: the tensors' shape checks still apply
  }
  if (saved_optimizer != optimizer)
    fail("--resume: checkpoint '", path, "' holds the state of optimizer.name ",
         kOptimizerNameChoices.word(saved_optimizer), " but this run's optimizer.name is ",
         kOptimizerNameChoices.word(optimizer),
         " (resume with the same optimizer, or start a new run from its weights with --init)");
  if (saved != model)
    fail("--resume: checkpoint '", path, "' holds a model of ", model_text(saved),
         " but this run's model is ", model_text(model), " (set model: in the config to match)");
}

std::optional<ConfigChange> checkpoint_model_difference(const std::string& path,
                                                        const ModelConfig& model) {
  const std::string saved_yaml = read_checkpoint_config(path);  // a damaged file: its error
  Config saved, run;
  try {
    saved.model = parse_config(saved_yaml, path + " (config attribute)").model;
  } catch (const Error&) {
    return std::nullopt;  // a config this version cannot read
  }
  run.model = model;
  const bool moe = saved.model.moe.enabled() || model.moe.enabled();
  for (const ConfigChange& change : config_changes(saved, run)) {
    if (!change.key.starts_with("model.")) continue;
    if (change.key.starts_with("model.moe.") && change.key != "model.moe.experts" &&
        !(moe && (change.key == "model.moe.top_k" || change.key == "model.moe.every")))
      continue;  // a training setting, or a key of experts neither model has
    return change;
  }
  return std::nullopt;
}

// Absolute names of every dataset in the file, sorted.
std::vector<std::string> checkpoint_detail::dataset_names_in(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  const auto collect = [](hid_t group, const char* name, const H5L_info_t*, void* data) -> herr_t {
    H5O_info_t info;
    if (H5Oget_info_by_name(group, name, &info, H5P_DEFAULT) < 0) return -1;
    if (info.type == H5O_TYPE_DATASET)
      static_cast<std::vector<std::string>*>(data)->push_back("/" + std::string(name));
    return 0;
  };
  if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, collect, &names) < 0)
    fail("checkpoint '", path, "': cannot list its contents: ", hdf5_error_reason());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace strata
