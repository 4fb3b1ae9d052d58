// Fuzz target: checkpoints that are valid HDF5 files with hostile contents
// (train/checkpoint/checkpoint.h, checkpoint_verify.h, saved_model.h).
//
// A tiny model's checkpoint (with AdamW moments and a tokenizer blob) is written once; each input
// is a sequence of edits to a copy of it (FieldReader): an attribute set to another type or value,
// an attribute or object deleted, a dataset replaced by one of another type, rank or extent (up
// to 2^62 elements, never written), values overwritten with or without a matching checksum, a
// model size in the stored config changed, a DiLoCo worker's state added; the edited file is then
// mostly sealed again (checkpoint_seal.h), so the edits reach the readers behind the seal. Then
// everything the tools and a resume do with a checkpoint (checkpoint_read.h).
#include <hdf5.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "model/parameter_layout.h"
#include "plan/config.h"
#include "tests/fuzz/checkpoint_read.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace {

using strata::fuzz::FieldReader;
namespace fs = std::filesystem;

const strata::ModelConfig kModel{1, 1, 8, 4, 16, {}, {}};

// The checkpoint every input edits, and the names of its groups and datasets.
struct Original {
  std::string path;
  std::vector<std::string> objects;
};

std::vector<std::string> object_names(hid_t file) {
  std::vector<std::string> names{"/"};
  const auto collect = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back("/" + std::string(name));
    return 0;
  };
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, collect, &names);
  return names;
}

const Original& original() {
  static const Original made = [] {
    Original o;
    const strata::GptShape shape{kModel.n_layer, kModel.n_head, kModel.d_model, kModel.seq_len,
                                 kModel.vocab_size};
    const strata::ParameterLayout layout = strata::ParameterLayout::for_gpt(shape);
    strata::Config config;
    config.model = kModel;
    config.data.train = "unused";
    strata::Checkpoint ckpt;
    ckpt.config_yaml = strata::config_to_yaml(config);
    ckpt.state.step = 3;
    ckpt.params.resize(layout.total());
    ckpt.adam_m.resize(layout.total());
    ckpt.adam_v.resize(layout.total());
    for (std::size_t i = 0; i < ckpt.params.size(); ++i) {
      ckpt.params[i] = 0.01f * static_cast<float>(i % 97);
      ckpt.adam_m[i] = 0.001f * static_cast<float>(i % 13);
      ckpt.adam_v[i] = 0.0001f * static_cast<float>(i % 7);
    }
    ckpt.tokenizer_model = "not a tokenizer: bytes the reader must carry unchanged";
    o.path = strata::write_checkpoint((strata::fuzz::scratch_directory() / "original").string(),
                                      shape, layout, ckpt);
    strata::H5File file = strata::H5File::open_read(o.path);
    o.objects = object_names(file.id());
    return o;
  }();
  return made;
}

std::string pick_object(FieldReader& in, hid_t file) {
  const std::vector<std::string> names = object_names(file);
  return names[in.pick(names.size())];
}

std::string pick_attribute(FieldReader& in, hid_t object) {
  H5O_info_t info;
  if (H5Oget_info(object, &info) < 0 || info.num_attrs == 0) return "checksum";
  const hsize_t index = in.pick(info.num_attrs);
  char name[256] = {};
  if (H5Aget_name_by_idx(object, ".", H5_INDEX_NAME, H5_ITER_INC, index, name, sizeof name - 1,
                         H5P_DEFAULT) < 0)
    return "checksum";
  return name;
}

void set_attribute(FieldReader& in, hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  switch (in.pick(4)) {
    case 0:
      strata::write_attribute_string(object, name, in.text(200));
      break;
    case 1:
      strata::write_attribute_f64(object, name, std::bit_cast<double>(in.u64()));
      break;
    default:
      strata::write_attribute_i64(object, name, static_cast<std::int64_t>(in.u64(in.pick(9))));
  }
}

void replace_dataset(FieldReader& in, hid_t file, const std::string& name) {
  static const std::array<hid_t*, 5> types = {&H5T_IEEE_F32LE_g, &H5T_IEEE_F64LE_g,
                                              &H5T_STD_I32LE_g, &H5T_STD_U8LE_g, &H5T_STD_I64LE_g};
  H5Ldelete(file, name.c_str(), H5P_DEFAULT);
  const hid_t type = *types[in.pick(types.size())];
  std::vector<std::uint64_t> dims(in.pick(4));
  for (auto& dim : dims) dim = in.pick(4) == 0 ? in.u64() % (std::uint64_t{1} << 62) : in.pick(40);
  strata::H5Id dataset;
  if (dims.empty()) {
    dataset = strata::create_dataset(file, name, type, dims);
  } else {
    dataset = strata::create_dataset(file, name, type, std::vector<std::uint64_t>(dims.size(), 0),
                                     std::vector<std::uint64_t>(dims.size(), 64), true);
    strata::set_dataset_extent(dataset.get(), dims);
  }
  if (in.flag())
    strata::write_attribute_i64(dataset.get(), "checksum", static_cast<std::int64_t>(in.u64()));
}

// Overwrites a few elements of an existing 1-D-or-more fp32 or uint8 dataset; `fix_checksum`
// stores the checksum of the new contents, so only the values themselves are hostile.
void write_values(FieldReader& in, hid_t file, const std::string& name) {
  strata::H5Id dataset = strata::open_dataset(file, name);
  const std::vector<std::uint64_t> dims = strata::dataset_dims(dataset.get());
  std::uint64_t count = 1;
  for (const std::uint64_t dim : dims) count *= dim;
  if (dims.empty() || count == 0 || count > (1u << 20)) return;
  const bool fix_checksum = in.flag();
  if (strata::dataset_type_class(dataset.get()) == H5T_FLOAT) {
    std::vector<float> values = strata::read_dataset_f32(file, name);
    for (int edit = 0, edits = 1 + static_cast<int>(in.pick(4)); edit < edits; ++edit)
      values[in.pick(values.size())] = std::bit_cast<float>(static_cast<std::uint32_t>(in.u64(4)));
    strata::write_dataset_slab<float>(dataset.get(), std::vector<std::uint64_t>(dims.size(), 0),
                                      dims, values.data());
    if (fix_checksum) {
      strata::TensorSlice whole;
      whole.mid = whole.mid_count = static_cast<std::int64_t>(values.size());
      H5Adelete(dataset.get(), "checksum");
      strata::write_attribute_i64(
          dataset.get(), "checksum",
          static_cast<std::int64_t>(strata::checksum_slice(values.data(), whole, 0, whole.mid)));
    }
  } else {
    std::vector<std::uint8_t> bytes = strata::read_dataset<std::uint8_t>(file, name);
    bytes[in.pick(bytes.size())] = in.byte();
    strata::write_dataset_slab<std::uint8_t>(
        dataset.get(), std::vector<std::uint64_t>(dims.size(), 0), dims, bytes.data());
    if (fix_checksum) {
      H5Adelete(dataset.get(), "checksum");
      strata::write_attribute_i64(
          dataset.get(), "checksum",
          static_cast<std::int64_t>(strata::checksum_bytes(bytes.data(), bytes.size())));
    }
  }
}

// Sets one "key: value" line of the stored config to another value.
void edit_config(FieldReader& in, hid_t file) {
  static const std::array<const char*, 8> keys = {"n_layer",    "n_head",      "d_model", "seq_len",
                                                  "vocab_size", "micro_batch", "workers", "format"};
  std::string yaml = strata::read_attribute_string(file, "config");
  const std::string key = std::string(keys[in.pick(keys.size())]) + ": ";
  const std::size_t at = yaml.find(key);
  const std::string value =
      in.flag() ? std::to_string(static_cast<std::int64_t>(in.u64(in.pick(9)))) : in.text(40);
  if (at == std::string::npos) {
    yaml += "\n" + key + value + "\n";
  } else {
    const std::size_t end = yaml.find('\n', at);
    yaml.replace(at + key.size(),
                 end == std::string::npos ? std::string::npos : end - at - key.size(), value);
  }
  H5Adelete(file, "config");
  strata::write_attribute_string(file, "config", yaml);
}

void add_worker_state(FieldReader& in, hid_t file) {
  const std::string name = "/state/worker_" + std::to_string(1 + in.pick(3));
  if (strata::has_object(file, name)) return;
  strata::H5Id group = strata::create_group(file, name);
  for (const char* attribute : {"step", "data_position", "seed", "adam_steps"})
    if (in.pick(8) != 0)
      strata::write_attribute_i64(group.get(), attribute,
                                  static_cast<std::int64_t>(in.u64(in.pick(9))));
  if (in.pick(8) != 0)
    strata::write_attribute_f64(group.get(), "loss_scale", std::bit_cast<double>(in.u64()));
}

void edit(FieldReader& in, hid_t file) {
  const std::string object = pick_object(in, file);
  const bool is_dataset = H5Oexists_by_name(file, object.c_str(), H5P_DEFAULT) > 0 && [&] {
    H5O_info_t info;
    return H5Oget_info_by_name(file, object.c_str(), &info, H5P_DEFAULT) >= 0 &&
           info.type == H5O_TYPE_DATASET;
  }();
  switch (in.pick(7)) {
    case 0: {
      strata::H5Id opened = strata::open_object(file, object);
      set_attribute(in, opened.get(), pick_attribute(in, opened.get()));
      break;
    }
    case 1: {
      strata::H5Id opened = strata::open_object(file, object);
      H5Adelete(opened.get(), pick_attribute(in, opened.get()).c_str());
      break;
    }
    case 2:
      if (object != "/") H5Ldelete(file, object.c_str(), H5P_DEFAULT);
      break;
    case 3:
      if (is_dataset) replace_dataset(in, file, object);
      break;
    case 4:
      if (is_dataset) write_values(in, file, object);
      break;
    case 5:
      edit_config(in, file);
      break;
    default:
      add_worker_state(in, file);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FieldReader in(data, size);
  // Mostly sealed again after the edits, so that they reach the readers behind the seal.
  const bool reseal = in.pick(8) != 0;
  static std::uint64_t inputs = 0;  // a new path for each input, as InputFile explains
  const fs::path copy =
      strata::fuzz::scratch_directory() / "edited" / std::to_string(++inputs) / "step_00000003.h5";
  fs::create_directories(copy.parent_path());
  fs::copy_file(original().path, copy);
  {
    strata::quiet_hdf5_errors();
    strata::H5File file = strata::H5File::open_write(copy.string());
    try {  // an edit HDF5 refuses (a type it cannot store there, say) ends the editing
      for (int edits = 1 + static_cast<int>(in.pick(4)); edits > 0 && !in.empty(); --edits)
        edit(in, file.id());
    } catch (const strata::Error&) {
    }
    file.close();
  }
  if (reseal) strata::seal_checkpoint_file(copy.string());
  strata::fuzz::read_checkpoint_file(copy.string(), kModel);
  fs::remove_all(copy.parent_path());
  return 0;
}
