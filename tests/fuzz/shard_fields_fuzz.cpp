// Fuzz target: token shards that are valid HDF5 files with hostile contents, read as a split of
// one or two shards (data/token_shards.h, data/loader.h).
//
// Input: a sequence of choices (FieldReader) for each shard: whether /tokens exists, its element
// type, rank, extent (up to 2^62 elements, most of them never written: HDF5 reads them as zeros),
// a few token values, and each root attribute's presence, type and value. Raw bytes rarely get
// past HDF5's parser (shard_fuzz.cpp); these reach every check of ours on what a shard holds.
#include <hdf5.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "tests/fuzz/shard_read.h"

namespace {

using strata::fuzz::FieldReader;

hid_t pick_type(FieldReader& in) {
  static const std::array<hid_t*, 9> types = {
      &H5T_STD_U16LE_g, &H5T_STD_U32LE_g, &H5T_STD_I32LE_g,  &H5T_STD_U8LE_g,  &H5T_STD_I64LE_g,
      &H5T_STD_U64LE_g, &H5T_STD_I16LE_g, &H5T_IEEE_F32LE_g, &H5T_IEEE_F64LE_g};
  H5open();  // initialises the H5T_* globals
  return *types[in.pick(types.size())];
}

void write_integer_attribute(FieldReader& in, hid_t file, const char* name) {
  switch (in.pick(4)) {
    case 0:
      return;  // absent
    case 1:
      strata::write_attribute_i64(file, name, static_cast<std::int64_t>(in.u64(in.pick(9))));
      return;
    case 2:
      strata::write_attribute_f64(file, name, static_cast<double>(in.u64(2)) + 0.5);
      return;
    default:
      strata::write_attribute_string(file, name, in.text(24));
      return;
  }
}

void write_shard(FieldReader& in, const std::string& path) {
  strata::H5File file = strata::H5File::create(path);
  if (in.pick(8) != 0) {
    const hid_t type = pick_type(in);
    const int rank = in.pick(8) == 0 ? static_cast<int>(in.pick(3)) : 1;
    std::vector<std::uint64_t> dims(static_cast<std::size_t>(rank));
    for (auto& dim : dims)
      dim = in.pick(4) == 0 ? in.u64(8) % (std::uint64_t{1} << 62) : in.pick(64);
    std::vector<std::uint64_t> chunk(dims.size(), 1024);
    // Chunked and extendible: a huge extent costs nothing until it is read.
    strata::H5Id tokens = dims.empty() ? strata::create_dataset(file.id(), "tokens", type, dims)
                                       : strata::create_dataset(file.id(), "tokens", type,
                                                                std::vector<std::uint64_t>(rank, 0),
                                                                chunk, /*extendible=*/true);
    if (!dims.empty()) strata::set_dataset_extent(tokens.get(), dims);
    if (rank == 1 && dims[0] > 0) {
      std::vector<std::int64_t> values(
          static_cast<std::size_t>(std::min<std::uint64_t>(dims[0], 32)));
      for (auto& value : values) value = static_cast<std::int64_t>(in.u64(in.pick(5)));
      const std::uint64_t offset[] = {in.flag() ? dims[0] - values.size() : 0};
      const std::uint64_t extent[] = {values.size()};
      // Converted to the dataset's type by HDF5 (values out of its range are clipped).
      strata::write_dataset_slab<std::int64_t>(tokens.get(), offset, extent, values.data());
    }
  }
  write_integer_attribute(in, file.id(), "vocab_size");
  write_integer_attribute(in, file.id(), "eos_id");
  if (in.pick(8) != 0) {
    const std::string sha = in.flag() ? std::string(64, 'a') : in.text(80);
    strata::write_attribute_string(file.id(), "tokenizer_sha256", sha);
  }
  file.close();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FieldReader in(data, size);
  const int seq_len = 1 + static_cast<int>(in.pick(64));
  const int shards = 1 + static_cast<int>(in.pick(2));
  const std::filesystem::path split = strata::fuzz::scratch_directory() / "split";
  std::filesystem::remove_all(split);
  std::filesystem::create_directories(split);
  for (int shard = 0; shard < shards; ++shard)
    write_shard(in, (split / ("shard_" + std::to_string(shard) + ".h5")).string());
  strata::fuzz::read_split(split.string(), seq_len);
  return 0;
}
