#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "data/hdf5_handle.h"
#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {
namespace fs = std::filesystem;

std::uint64_t checksum_bytes(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = mix64(bytes);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = mix64(h ^ word) + i;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, p + i, bytes - i);
  return mix64(h ^ tail);
}

std::string checkpoint_file_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return name;
}

namespace {

std::vector<std::uint64_t> dims_of(const TensorView& t) {
  return std::vector<std::uint64_t>(t.shape.begin(), t.shape.end());
}

void write_tensor(hid_t file, const std::string& path, const float* data, const TensorView& t) {
  const std::vector<std::uint64_t> dims = dims_of(t);
  write_dataset_f32(file, path, std::span<const float>(data, t.size), dims);
  H5Id dataset = open_dataset(file, path);
  write_attribute_i64(dataset.get(), "checksum",
                      static_cast<std::int64_t>(checksum_bytes(data, t.size * sizeof(float))));
}

void read_tensor(hid_t file, const std::string& file_path, const std::string& path, float* out,
                 const TensorView& t) {
  if (!has_object(file, path)) fail("checkpoint '", file_path, "' has no tensor '", path, "'");
  const std::vector<std::uint64_t> dims = dataset_dims(file, path);
  if (dims != dims_of(t)) {
    std::ostringstream got, want;
    for (std::size_t i = 0; i < dims.size(); ++i) got << (i ? "," : "") << dims[i];
    for (std::size_t i = 0; i < t.shape.size(); ++i) want << (i ? "," : "") << t.shape[i];
    fail("checkpoint '", file_path, "': tensor '", path, "' has shape [", got.str(),
         "], the model needs [", want.str(), "]");
  }
  read_dataset_f32(file, path, std::span<float>(out, t.size));
  H5Id dataset = open_dataset(file, path);
  const auto expected = static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum"));
  if (checksum_bytes(out, t.size * sizeof(float)) != expected)
    fail("checkpoint '", file_path, "': tensor '", path, "' fails its checksum (file is damaged)");
}

void check_format(hid_t file, const std::string& path) {
  if (!has_attribute(file, "format") || read_attribute_string(file, "format") != kCheckpointFormat)
    fail("'", path, "' is not a Strata checkpoint (missing or unknown 'format' attribute)");
}

}  // namespace

std::string write_checkpoint(const std::string& directory, const ParameterLayout& layout,
                             const Checkpoint& ckpt) {
  fs::create_directories(directory);
  const std::string final_path =
      (fs::path(directory) / checkpoint_file_name(ckpt.state.step)).string();
  // Hidden, per-process temporary name: never matched by latest_checkpoint() or prune.
  std::string temp_name = ".";
  temp_name.append(checkpoint_file_name(ckpt.state.step))
      .append(".tmp")
      .append(std::to_string(::getpid()));
  const std::string temp_path = (fs::path(directory) / temp_name).string();
  try {
    H5File file = H5File::create(temp_path);
    write_attribute_string(file.id(), "format", kCheckpointFormat);
    write_attribute_string(file.id(), "config", ckpt.config_yaml);
    for (const TensorView& t : layout.tensors()) {
      write_tensor(file.id(), "/model/" + t.name, ckpt.params.data() + t.offset, t);
      if (!ckpt.adam_m.empty()) {
        write_tensor(file.id(), "/optimizer/m/" + t.name, ckpt.adam_m.data() + t.offset, t);
        write_tensor(file.id(), "/optimizer/v/" + t.name, ckpt.adam_v.data() + t.offset, t);
      }
    }
    H5Id state = create_group(file.id(), "/state");
    write_attribute_i64(state.get(), "step", ckpt.state.step);
    write_attribute_i64(state.get(), "data_position", ckpt.state.data_position);
    write_attribute_i64(state.get(), "seed", static_cast<std::int64_t>(ckpt.state.seed));
    write_attribute_f64(state.get(), "loss_scale", ckpt.state.loss_scale);
    write_attribute_i64(state.get(), "adam_steps", ckpt.state.adam_steps);
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
  } catch (...) {
    std::error_code ignored;
    fs::remove(temp_path, ignored);
    throw;
  }
  std::error_code error;
  fs::rename(temp_path, final_path, error);
  if (error) fail("cannot rename '", temp_path, "' to '", final_path, "': ", error.message());
  return final_path;
}

std::string read_checkpoint_config(const std::string& path) {
  if (!fs::is_regular_file(path)) fail("checkpoint '", path, "' does not exist");
  H5File file = H5File::open_read(path);
  check_format(file.id(), path);
  return read_attribute_string(file.id(), "config");
}

Checkpoint read_checkpoint(const std::string& path, const ParameterLayout& layout,
                           bool with_optimizer) {
  if (!fs::is_regular_file(path)) fail("checkpoint '", path, "' does not exist");
  H5File file = H5File::open_read(path);
  check_format(file.id(), path);
  Checkpoint ckpt;
  ckpt.config_yaml = read_attribute_string(file.id(), "config");
  ckpt.params.resize(layout.total());
  if (with_optimizer) {
    ckpt.adam_m.resize(layout.total());
    ckpt.adam_v.resize(layout.total());
  }
  for (const TensorView& t : layout.tensors()) {
    read_tensor(file.id(), path, "/model/" + t.name, ckpt.params.data() + t.offset, t);
    if (with_optimizer) {
      read_tensor(file.id(), path, "/optimizer/m/" + t.name, ckpt.adam_m.data() + t.offset, t);
      read_tensor(file.id(), path, "/optimizer/v/" + t.name, ckpt.adam_v.data() + t.offset, t);
    }
  }
  if (!has_object(file.id(), "/state")) fail("checkpoint '", path, "' has no /state group");
  H5Id state = open_group(file.id(), "/state");
  ckpt.state.step = read_attribute_i64(state.get(), "step");
  ckpt.state.data_position = read_attribute_i64(state.get(), "data_position");
  ckpt.state.seed = static_cast<std::uint64_t>(read_attribute_i64(state.get(), "seed"));
  ckpt.state.loss_scale = read_attribute_f64(state.get(), "loss_scale");
  ckpt.state.adam_steps = read_attribute_i64(state.get(), "adam_steps");
  if (has_object(file.id(), "/tokenizer/model")) {
    const std::vector<std::uint8_t> bytes =
        read_dataset<std::uint8_t>(file.id(), "/tokenizer/model");
    H5Id dataset = open_dataset(file.id(), "/tokenizer/model");
    if (checksum_bytes(bytes.data(), bytes.size()) !=
        static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum")))
      fail("checkpoint '", path, "': the tokenizer model fails its checksum (file is damaged)");
    ckpt.tokenizer_model.assign(bytes.begin(), bytes.end());
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
}  // namespace

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
