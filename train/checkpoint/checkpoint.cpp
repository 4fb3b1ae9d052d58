#include "train/checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "data/hdf5_handle.h"
#include "data/token_shards.h"
#include "model/core/error.h"
#include "parallel/mesh/reduction_plan.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace strata {
namespace fs = std::filesystem;

std::string checkpoint_file_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return name;
}

// Below this many elements a loop runs on one thread: waking the team costs more (and much more
// on a loaded machine) than the loop.
constexpr std::int64_t kParallelElements = 1 << 16;

std::vector<ElementRange> checkpoint_write_ranges(const ParameterLayout& layout,
                                                  const ModelPartition& partition,
                                                  const ElementRange& share) {
  std::vector<ElementRange> writes;
  for (const TensorView& t : layout.tensors()) {
    if (is_tied_copy(partition, t) || (replicated_over_tp(partition, t) && partition.tp_rank != 0))
      continue;
    if (partition.ep_rank != 0 && !is_expert_tensor(t)) continue;
    append_merged(writes, intersect({t.offset, t.offset + t.size}, share));
  }
  return writes;
}

bool writes_statistic(const ParameterLayout& layout, const std::vector<ElementRange>& writes,
                      const std::string& tensor) {
  const TensorView& t = layout.at(tensor);
  if (t.size == 0 || t.slice.logical_index(0) != 0) return false;
  return std::any_of(writes.begin(), writes.end(),
                     [&](const ElementRange& w) { return w.contains(t.offset); });
}

namespace {

std::vector<std::uint64_t> logical_dims(const TensorView& t) {
  return std::vector<std::uint64_t>(t.slice.logical_shape.begin(), t.slice.logical_shape.end());
}

std::string shape_text(const std::vector<std::uint64_t>& dims) {
  std::ostringstream out;
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? "," : "") << dims[i];
  return out.str();
}

// The runs of consecutive logical elements (first logical index, count) that local elements
// [first, first + count) of `t` occupy: one per `outer` block they meet (local order is logical
// order within a block).
std::vector<std::pair<std::uint64_t, std::uint64_t>> logical_runs(const TensorView& t,
                                                                  std::int64_t first,
                                                                  std::int64_t count) {
  const TensorSlice& s = t.slice;
  const std::int64_t block = s.mid_count * s.inner;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs;
  for (std::int64_t at = first, end = first + count; at < end;) {
    const std::int64_t run = std::min(end, (at / block + 1) * block) - at;
    runs.emplace_back(static_cast<std::uint64_t>(s.logical_index(at)),
                      static_cast<std::uint64_t>(run));
    at += run;
  }
  return runs;
}

hid_t file_type(StoredType stored) {
  switch (stored) {
    case StoredType::int8:
      return H5T_STD_I8LE;
    case StoredType::uint8:
      return H5T_STD_U8LE;
    case StoredType::float32:
      break;
  }
  return H5T_IEEE_F32LE;
}

// Creates every logical dataset of `logical` under `group` with a zero checksum.
void create_tensors(hid_t file, const std::string& group, const ParameterLayout& logical,
                    StoredType stored) {
  for (const TensorView& t : logical.tensors()) {
    const std::vector<std::uint64_t> dims = logical_dims(t);
    H5Id dataset = create_dataset(file, group + t.name, file_type(stored), dims);
    write_attribute_i64(dataset.get(), "checksum", 0);
  }
}

// Writes local elements [first, first + count) of `t` (values pointing at element `first`) and
// adds their share to the tensor's checksum.
void write_elements(hid_t file, const std::string& path, const float* values, const TensorView& t,
                    std::int64_t first, std::int64_t count) {
  H5Id dataset = open_dataset(file, path);
  // (An int8 or uint8 dataset: HDF5 converts the fp32 values, integers in its range.)
  write_dataset_runs_f32(dataset.get(), logical_runs(t, first, count), values);
  const std::uint64_t sum =
      static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum")) +
      checksum_slice(values, t.slice, first, count);
  write_attribute_i64(dataset.get(), "checksum", static_cast<std::int64_t>(sum));
}

std::string dataset_group(const std::string& buffer_name) { return "/" + buffer_name + "/"; }

// A statistic of `size` values as a whole 1-D tensor (its checksum's view).
TensorSlice statistic_slice(std::int64_t size) {
  TensorSlice s;
  s.logical_shape = {size};
  s.mid = s.mid_count = size;
  return s;
}

// The statistics of a per-tensor buffer this writer writes, each a whole dataset of its own.
void write_statistics(hid_t file, const CheckpointWriter& writer, const StateBuffer& buffer) {
  STRATA_CHECK(buffer.stored == StoredType::float32, "per-tensor buffer '", buffer.name,
               "' must be float32");
  std::size_t at = 0;
  for (const TensorStatistic& s : buffer.statistics) {
    const float* values = buffer.values.data() + at;
    at += static_cast<std::size_t>(s.size);
    if (!writes_statistic(*writer.layout, writer.writes, s.tensor)) continue;
    const std::vector<std::uint64_t> dims{static_cast<std::uint64_t>(s.size)};
    write_dataset<float>(file, dataset_group(buffer.name) + s.tensor,
                         std::span<const float>(values, dims[0]), dims);
    H5Id dataset = open_dataset(file, dataset_group(buffer.name) + s.tensor);
    write_attribute_i64(
        dataset.get(), "checksum",
        static_cast<std::int64_t>(checksum_slice(values, statistic_slice(s.size), 0, s.size)));
  }
  STRATA_CHECK(at == buffer.values.size(), "state buffer '", buffer.name,
               "' does not hold its statistics");
}

void check_statistic_shape(hid_t file, const std::string& file_path, const std::string& path,
                           std::int64_t size) {
  if (!has_object(file, path)) fail("checkpoint '", file_path, "' has no tensor '", path, "'");
  const std::vector<std::uint64_t> dims = dataset_dims(file, path);
  const std::vector<std::uint64_t> expected{static_cast<std::uint64_t>(size)};
  if (dims != expected)
    fail("checkpoint '", file_path, "': tensor '", path, "' has shape [", shape_text(dims),
         "], the optimizer needs [", size, "]");
}

// Every statistic of a per-tensor buffer, whole, checksums verified.
void read_statistics(hid_t file, const std::string& file_path, StateBuffer& buffer) {
  buffer.values.clear();
  for (const TensorStatistic& s : buffer.statistics) {
    const std::string path = dataset_group(buffer.name) + s.tensor;
    const std::vector<float> values = read_dataset_f32(file, path);
    H5Id dataset = open_dataset(file, path);
    if (checksum_slice(values.data(), statistic_slice(s.size), 0, s.size) !=
        static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum")))
      fail("checkpoint '", file_path, "': tensor '", path,
           "' fails its checksum (file is damaged)");
    buffer.values.insert(buffer.values.end(), values.begin(), values.end());
  }
}

void check_logical_tensor_shape(hid_t file, const std::string& file_path, const std::string& path,
                                const TensorView& t) {
  if (!has_object(file, path)) fail("checkpoint '", file_path, "' has no tensor '", path, "'");
  const std::vector<std::uint64_t> dims = dataset_dims(file, path);
  if (dims != logical_dims(t))
    fail("checkpoint '", file_path, "': tensor '", path, "' has shape [", shape_text(dims),
         "], the model needs [", shape_text(logical_dims(t)), "]");
}

// Reads the whole logical tensor `path` (to verify its checksum) into `whole`.
void read_logical_tensor(hid_t file, const std::string& file_path, const std::string& path,
                         const TensorView& t, std::vector<float>& whole) {
  check_logical_tensor_shape(file, file_path, path, t);
  whole.resize(static_cast<std::size_t>(t.slice.logical_size()));
  read_dataset_f32(file, path, std::span<float>(whole));
  H5Id dataset = open_dataset(file, path);
  const auto expected = static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum"));
  TensorSlice all = t.slice;
  all.mid_begin = 0;
  all.mid_count = all.mid;
  if (checksum_slice(whole.data(), all, 0, all.logical_size()) != expected)
    fail("checkpoint '", file_path, "': tensor '", path, "' fails its checksum (file is damaged)");
}

// The same decision on every rank: an error anywhere fails the write everywhere, with the reason
// of the lowest failing rank.
void agree_or_fail(Communicator* world, const std::string& local_error,
                   const std::string& final_path) {
  std::string error = local_error;
  if (world) {
    std::int64_t lowest = local_error.empty() ? 0 : world->size() - world->rank();
    world->all_reduce_max(&lowest, 1);
    if (lowest == 0) return;
    const int root = world->size() - static_cast<int>(lowest);
    std::int64_t size = static_cast<std::int64_t>(error.size());
    world->broadcast(&size, sizeof(size), root);
    error.resize(static_cast<std::size_t>(size));
    world->broadcast(error.data(), error.size(), root);
  }
  if (error.empty()) return;
  fail_together("cannot write checkpoint '", final_path, "': ", error,
                " (earlier checkpoints are untouched)");
}

}  // namespace

namespace {
void write_state_attributes(hid_t group, const CheckpointState& state) {
  write_attribute_i64(group, "step", state.step);
  write_attribute_i64(group, "data_position", state.data_position);
  write_attribute_i64(group, "seed", static_cast<std::int64_t>(state.seed));
  write_attribute_f64(group, "loss_scale", state.loss_scale);
  write_attribute_i64(group, "adam_steps", state.adam_steps);
  write_attribute_i64(group, "loss_scale_clean_steps", state.loss_scale_clean_steps);
}

CheckpointState read_state_attributes(hid_t group) {
  CheckpointState state;
  state.step = read_attribute_i64(group, "step");
  state.data_position = read_attribute_i64(group, "data_position");
  state.seed = static_cast<std::uint64_t>(read_attribute_i64(group, "seed"));
  state.loss_scale = read_attribute_f64(group, "loss_scale");
  state.adam_steps = read_attribute_i64(group, "adam_steps");
  if (has_attribute(group, "loss_scale_clean_steps"))
    state.loss_scale_clean_steps = read_attribute_i64(group, "loss_scale_clean_steps");
  return state;
}
}  // namespace

void create_checkpoint_file(const std::string& path, const GptShape& shape,
                            const CheckpointMeta& ckpt,
                            const std::vector<StateDatasets>& datasets) {
  const ParameterLayout logical = ParameterLayout::for_gpt(shape);
  H5File file = H5File::create(path, kSealBytes);
  write_attribute_string(file.id(), "format", kCheckpointFormat);
  write_attribute_string(file.id(), "config", ckpt.config_yaml);
  if (ckpt.without_tokenizer) write_attribute_string(file.id(), "tokenizer_sha256", kNoTokenizer);
  for (const StateDatasets& d : datasets)
    create_tensors(file.id(), dataset_group(d.name), logical, d.stored);
  H5Id state = create_group(file.id(), "/state");
  write_state_attributes(state.get(), ckpt.state);
  for (std::size_t w = 0; w < ckpt.worker_states.size(); ++w) {
    H5Id worker = create_group(file.id(), "/state/worker_" + std::to_string(w + 1));
    write_state_attributes(worker.get(), ckpt.worker_states[w]);
  }
  if (!ckpt.tokenizer_model.empty()) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(ckpt.tokenizer_model.data());
    const std::uint64_t n = ckpt.tokenizer_model.size();
    write_dataset<std::uint8_t>(file.id(), "/tokenizer/model",
                                std::span<const std::uint8_t>(bytes, n),
                                std::span<const std::uint64_t>(&n, 1));
    H5Id dataset = open_dataset(file.id(), "/tokenizer/model");
    write_attribute_i64(dataset.get(), "checksum",
                        static_cast<std::int64_t>(checksum_bytes(bytes, n)));
  }
  file.close();
}

void write_checkpoint_elements(const std::string& path, const CheckpointWriter& writer,
                               const std::vector<StateBuffer>& buffers) {
  H5File file = H5File::open_write(path);
  for (const StateBuffer& buffer : buffers) {
    if (buffer.per_tensor) {
      write_statistics(file.id(), writer, buffer);
      continue;
    }
    STRATA_CHECK(buffer.values.size() == buffer.range.size(), "state buffer '", buffer.name,
                 "' does not hold its range");
    for (const TensorView& t : writer.layout->tensors()) {
      const ElementRange tensor{t.offset, t.offset + t.size};
      for (const ElementRange& w : writer.writes) {
        const ElementRange part = intersect(intersect(w, tensor), buffer.range);
        if (part.empty()) continue;
        write_elements(file.id(), dataset_group(buffer.name) + t.name,
                       buffer.values.data() + (part.begin - buffer.range.begin), t,
                       static_cast<std::int64_t>(part.begin - t.offset),
                       static_cast<std::int64_t>(part.size()));
      }
    }
  }
  file.close();
}

std::vector<StateDatasets> state_datasets(const CheckpointWriter& writer,
                                          const std::vector<StateBuffer>& buffers) {
  if (!writer.datasets.empty()) return writer.datasets;
  std::vector<StateDatasets> datasets;
  for (const StateBuffer& b : buffers)
    if (!b.per_tensor) datasets.push_back({b.name, b.stored});
  return datasets;
}

std::string write_checkpoint(const std::string& directory, const CheckpointWriter& writer,
                             const CheckpointMeta& ckpt, const std::vector<StateBuffer>& buffers) {
  STRATA_CHECK(writer.layout != nullptr);
  Communicator* world = writer.world;
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  const std::string final_path =
      (fs::path(directory) / checkpoint_file_name(ckpt.state.step)).string();
  // Hidden temporary name (rank 0's pid, shared): never matched by latest_checkpoint() or prune.
  std::int64_t pid = ::getpid();
  if (world) world->broadcast(&pid, sizeof(pid), 0);
  const std::string temp_path =
      (fs::path(directory) /
       ("." + checkpoint_file_name(ckpt.state.step) + ".tmp" + std::to_string(pid)))
          .string();
  auto remove_temp = [&] {
    std::error_code ignored;
    if (rank == 0) fs::remove(temp_path, ignored);
  };
  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(directory);
      create_checkpoint_file(temp_path, writer.shape, ckpt, state_datasets(writer, buffers));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  try {
    agree_or_fail(world, error, final_path);
    for (int turn = 0; turn < ranks; ++turn) {  // HDF5 files take one writer at a time
      if (turn == rank) {
        try {
          write_checkpoint_elements(temp_path, writer, buffers);
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      if (world) world->barrier();
    }
    agree_or_fail(world, error, final_path);
  } catch (...) {
    remove_temp();
    throw;
  }
  if (rank == 0) {
    try {
      seal_checkpoint_file(temp_path);  // the last write: a file that has its seal is complete
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::error_code ec;
    if (error.empty()) fs::rename(temp_path, final_path, ec);
    if (ec) error = "cannot rename '" + temp_path + "' to it: " + ec.message();
  }
  try {
    agree_or_fail(world, error, final_path);
  } catch (...) {
    remove_temp();
    throw;
  }
  return final_path;
}

std::string write_checkpoint(const std::string& directory, const GptShape& shape,
                             const ParameterLayout& layout, const Checkpoint& ckpt) {
  const ElementRange all{0, layout.total()};
  std::vector<StateBuffer> buffers{{"model", all, ckpt.params}};
  if (!ckpt.adam_m.empty()) {
    buffers.push_back({"optimizer/m", all, ckpt.adam_m});
    buffers.push_back({"optimizer/v", all, ckpt.adam_v});
  }
  const CheckpointWriter writer{&layout, shape, {all}, nullptr, {}};
  return write_checkpoint(
      directory, writer,
      {ckpt.config_yaml, ckpt.state, ckpt.tokenizer_model, {}, ckpt.without_tokenizer}, buffers);
}

H5File open_checkpoint(const std::string& path, bool check_seal) {
  if (!fs::is_regular_file(path)) fail("checkpoint '", path, "' does not exist");
  if (check_seal) check_checkpoint_seal(path);
  H5File file = H5File::open_read(path);
  read_checkpoint_format(file.id(), path);
  return file;
}

CheckpointFormat read_checkpoint_format(hid_t file, const std::string& path) {
  const std::optional<CheckpointFormat> format =
      has_attribute(file, "format") ? checkpoint_format_named(read_attribute_string(file, "format"))
                                    : std::nullopt;
  if (!format)
    fail("'", path, "' is not a Strata checkpoint of format ", accepted_checkpoint_formats(),
         " (missing or other 'format' attribute)");
  return *format;
}

std::string read_checkpoint_config(const std::string& path) {
  H5File file = open_checkpoint(path);
  return read_attribute_string(file.id(), "config");
}

std::int64_t read_checkpoint_model_tensors(const std::string& path) {
  H5File file = open_checkpoint(path);
  if (!has_object(file.id(), "/model")) return 0;
  const H5Id model = open_group(file.id(), "/model");
  H5G_info_t info;
  if (H5Gget_info(model.get(), &info) < 0)
    fail("checkpoint '", path, "': cannot list /model: ", hdf5_error_reason());
  return static_cast<std::int64_t>(info.nlinks);
}

int read_checkpoint_workers(const std::string& path) {
  H5File file = open_checkpoint(path);
  int workers = 1;
  while (has_object(file.id(), "/state/worker_" + std::to_string(workers))) ++workers;
  return workers;
}

CheckpointMeta read_checkpoint(const std::string& path, const ParameterLayout& layout,
                               std::vector<StateBuffer>& buffers) {
  H5File file = open_checkpoint(path);
  CheckpointMeta ckpt;
  ckpt.config_yaml = read_attribute_string(file.id(), "config");
  ckpt.without_tokenizer = has_attribute(file.id(), "tokenizer_sha256") &&
                           read_attribute_string(file.id(), "tokenizer_sha256") == kNoTokenizer;
  // Every shape before any buffer is allocated: a layout that is not the file's (a config that
  // claims a larger model, say) is an error, not an allocation of the size it claims.
  for (const StateBuffer& buffer : buffers) {
    for (const TensorStatistic& s : buffer.statistics)
      check_statistic_shape(file.id(), path, dataset_group(buffer.name) + s.tensor, s.size);
    if (buffer.per_tensor) continue;
    for (const TensorView& t : layout.tensors())
      if (!intersect({t.offset, t.offset + t.size}, buffer.range).empty())
        check_logical_tensor_shape(file.id(), path, dataset_group(buffer.name) + t.name, t);
  }
  for (StateBuffer& buffer : buffers)
    if (buffer.per_tensor)
      read_statistics(file.id(), path, buffer);
    else
      buffer.values.assign(buffer.range.size(), 0.0f);
  std::vector<float> whole;  // one logical tensor at a time
  for (const TensorView& t : layout.tensors()) {
    const ElementRange tensor{t.offset, t.offset + t.size};
    for (StateBuffer& buffer : buffers) {
      if (buffer.per_tensor) continue;
      const ElementRange part = intersect(tensor, buffer.range);
      if (part.empty()) continue;
      read_logical_tensor(file.id(), path, dataset_group(buffer.name) + t.name, t, whole);
      float* out = buffer.values.data() + (part.begin - buffer.range.begin);
      const std::size_t first = part.begin - t.offset;
#pragma omp parallel for schedule(static) if (part.size() >= kParallelElements)
      for (std::size_t i = 0; i < part.size(); ++i)
        out[i] = whole[static_cast<std::size_t>(
            t.slice.logical_index(static_cast<std::int64_t>(first + i)))];
    }
  }
  if (!has_object(file.id(), "/state")) fail("checkpoint '", path, "' has no /state group");
  H5Id state = open_group(file.id(), "/state");
  ckpt.state = read_state_attributes(state.get());
  for (int w = 1; has_object(file.id(), "/state/worker_" + std::to_string(w)); ++w)
    ckpt.worker_states.push_back(
        read_state_attributes(open_group(file.id(), "/state/worker_" + std::to_string(w)).get()));
  if (has_object(file.id(), "/tokenizer/model")) {
    const std::vector<std::uint8_t> bytes =
        read_dataset<std::uint8_t>(file.id(), "/tokenizer/model");
    H5Id dataset = open_dataset(file.id(), "/tokenizer/model");
    if (checksum_bytes(bytes.data(), bytes.size(), read_checkpoint_format(file.id(), path)) !=
        static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum")))
      fail("checkpoint '", path, "': the tokenizer model fails its checksum (file is damaged)");
    ckpt.tokenizer_model.assign(bytes.begin(), bytes.end());
  }
  return ckpt;
}

Checkpoint read_checkpoint(const std::string& path, const ParameterLayout& layout,
                           bool with_optimizer) {
  const ElementRange all{0, layout.total()};
  std::vector<StateBuffer> buffers{{"model", all, {}}};
  if (with_optimizer) {
    buffers.push_back({"optimizer/m", all, {}});
    buffers.push_back({"optimizer/v", all, {}});
  }
  CheckpointMeta meta = read_checkpoint(path, layout, buffers);
  Checkpoint ckpt{std::move(meta.config_yaml),
                  meta.state,
                  std::move(buffers[0].values),
                  {},
                  {},
                  std::move(meta.tokenizer_model),
                  meta.without_tokenizer};
  if (with_optimizer) {
    ckpt.adam_m = std::move(buffers[1].values);
    ckpt.adam_v = std::move(buffers[2].values);
  }
  return ckpt;
}

namespace {
// The step of a checkpoint file name "step_<8 or more digits>.h5", or -1 for any other name.
std::int64_t checkpoint_step(const std::string& name) {
  constexpr std::string_view prefix = "step_", suffix = ".h5";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() < 8 || digits.size() > 18) return -1;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}
}  // namespace

std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(const std::string& directory) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code error;
  if (!fs::is_directory(directory, error)) return found;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::int64_t step = checkpoint_step(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file()) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  const auto found = list_checkpoints(directory);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

void prune_checkpoints(const std::string& directory, int keep) {
  if (keep <= 0) return;
  const auto found = list_checkpoints(directory);
  for (std::size_t i = 0; i + keep < found.size(); ++i) fs::remove(found[i].second);
}

}  // namespace strata
