// Fuzz target: the HDF5 token shard reader (data/token_shards.h) and the windows training and
// evaluation take from it (data/loader.h), on arbitrary file bytes.
//
// Input: the first byte sets seq_len (1 to 64), the rest is the shard file. Most mutations break
// HDF5's own structures, so this target mostly exercises HDF5's parser under our error handling;
// shard_fields_fuzz.cpp builds well-formed HDF5 files with hostile contents instead.
#include <cstdint>
#include <string>

#include "tests/fuzz/shard_read.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int seq_len = 1 + data[0] % 64;
  const strata::fuzz::InputFile file(
      std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), "shard.h5");
  strata::fuzz::read_split(file.path(), seq_len);
  return 0;
}
