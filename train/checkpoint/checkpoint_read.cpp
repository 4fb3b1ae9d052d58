// Reading a checkpoint (train/checkpoint/checkpoint.h): its format, config and shape, and each
// state buffer's range of every local tensor out of the logical datasets, checksums verified.
#include "train/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "data/hdf5_handle.h"
#include "data/token_shards.h"
#include "model/core/error.h"
#include "parallel/mesh/reduction_plan.h"
#include "train/checkpoint/checkpoint_datasets.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace strata {
namespace fs = std::filesystem;
using namespace checkpoint_detail;

// Below this many elements a loop runs on one thread: waking the team costs more (and much more
// on a loaded machine) than the loop.
constexpr std::int64_t kParallelElements = 1 << 16;

namespace {

void check_statistic_shape(hid_t file, const std::string& file_path, const std::string& path,
                           std::int64_t size) {
  if (!has_object(file, path)) fail("checkpoint '", file_path, "' has no tensor '", path, "'");
  const std::vector<std::uint64_t> dims = dataset_dims(file, path);
  const std::vector<std::uint64_t> expected{static_cast<std::uint64_t>(size)};
  if (dims != expected)
    fail("checkpoint '", file_path, "': tensor '", path, "' has shape [", shape_text(dims),
         "], the run needs [", size, "]");
}

// Whether the file holds statistic `s` of `buffer` as the run needs it. An optional buffer's
// statistic it lacks, or holds in another shape (the FP8 histories of a GEMM that ran in the
// compute dtype, or of another history length), is read as zeros; any other buffer's must be
// there (check_statistic_shape says what is wrong). Files of format 4 may hold optional buffers
// too: those written with the FP8 histories before format 5 (checkpoint_format.h).
bool holds_statistic(hid_t file, const StateBuffer& buffer, const TensorStatistic& s) {
  if (!buffer.optional) return true;
  const std::string path = dataset_group(buffer.name) + s.tensor;
  return has_object(file, path) &&
         dataset_dims(file, path) == std::vector<std::uint64_t>{static_cast<std::uint64_t>(s.size)};
}

// Every statistic of a per-tensor buffer, whole, checksums verified (zeros for those an optional
// buffer's file lacks).
void read_statistics(hid_t file, const std::string& file_path, StateBuffer& buffer) {
  buffer.values.clear();
  for (const TensorStatistic& s : buffer.statistics) {
    if (!holds_statistic(file, buffer, s)) {
      buffer.values.insert(buffer.values.end(), static_cast<std::size_t>(s.size), 0.0f);
      continue;
    }
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
}  // namespace

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

std::optional<int> read_checkpoint_swarm_stage(const std::string& path) {
  H5File file = open_checkpoint(path);
  if (!has_attribute(file.id(), "swarm_stage")) return std::nullopt;
  return static_cast<int>(read_attribute_i64(file.id(), "swarm_stage"));
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
  if (has_attribute(file.id(), "swarm_stage")) {
    ckpt.swarm_stage = static_cast<int>(read_attribute_i64(file.id(), "swarm_stage"));
    // A stage's file lacks the other stages' tensors: say so rather than name a missing tensor.
    for (const TensorView& t : layout.tensors())
      if (!has_object(file.id(), "/model/" + t.name))
        fail("checkpoint '", path, "' holds stage ", ckpt.swarm_stage,
             " of a swarm alone, not tensor '", t.name,
             "': `ckpt swarm-assemble` makes one whole checkpoint of a swarm's stages");
  }
  // Every shape before any buffer is allocated: a layout that is not the file's (a config that
  // claims a larger model, say) is an error, not an allocation of the size it claims.
  for (const StateBuffer& buffer : buffers) {
    for (const TensorStatistic& s : buffer.statistics)
      if (holds_statistic(file.id(), buffer, s))
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

}  // namespace strata
