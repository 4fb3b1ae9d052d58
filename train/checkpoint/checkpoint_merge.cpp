// Merging checkpoints that hold disjoint tensors into one (train/checkpoint/checkpoint.h,
// write_merged_checkpoint): a swarm's stage checkpoints into a whole model's. Each tensor is
// copied as HDF5 stores it (its type and its checksum attribute), so the merged file holds the
// parts' values bit for bit and verifies as any checkpoint does.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "data/hdf5_handle.h"
#include "model/core/error.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_datasets.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace strata {
namespace fs = std::filesystem;
using namespace checkpoint_detail;

namespace {

// Copies dataset `name` (with its attributes) from `from` into `to`, making its groups.
void copy_dataset(hid_t from, hid_t to, const std::string& name, const std::string& part) {
  H5Id links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  if (links.get() < 0 || H5Pset_create_intermediate_group(links.get(), 1) < 0 ||
      H5Ocopy(from, name.c_str(), to, name.c_str(), H5P_DEFAULT, links.get()) < 0)
    fail("cannot copy tensor '", name, "' of '", part, "': ", hdf5_error_reason());
}

}  // namespace

std::string write_merged_checkpoint(const std::string& directory, const GptShape& shape,
                                    const CheckpointMeta& meta,
                                    const std::vector<std::string>& parts) {
  const std::string name = checkpoint_file_name(meta.state.step);
  const fs::path final_path = fs::path(directory) / name;
  if (fs::exists(final_path))
    fail("'", final_path.string(), "' exists already (choose another directory, or remove it)");
  fs::create_directories(directory);
  const fs::path temp_path =
      fs::path(directory) / ("." + name + ".tmp" + std::to_string(::getpid()));
  try {
    // The attributes, state and tokenizer, no tensor yet; the newest of the parts' formats, for
    // the optional buffers a part may hold.
    CheckpointFormat format = CheckpointFormat::v4;
    for (const std::string& part : parts) {
      H5File in = open_checkpoint(part);
      format = std::max(format, read_checkpoint_format(in.id(), part));
    }
    create_checkpoint_file(temp_path.string(), shape, meta, {}, nullptr, format);
    {
      H5File out = H5File::open_write(temp_path.string());
      std::map<std::string, std::string> holder;  // tensor: the part it came from
      for (const std::string& part : parts) {
        H5File in = open_checkpoint(part);
        for (const std::string& dataset : dataset_names_in(in.id(), part)) {
          if (dataset.starts_with("/tokenizer/")) continue;
          const auto [at, fresh] = holder.emplace(dataset, part);
          if (!fresh) fail("tensor '", dataset, "' is in both '", at->second, "' and '", part, "'");
          copy_dataset(in.id(), out.id(), dataset, part);
        }
      }
      out.close();
    }
    seal_checkpoint_file(temp_path.string());
    fs::rename(temp_path, final_path);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temp_path, ignored);
    throw;
  }
  return final_path.string();
}

}  // namespace strata
