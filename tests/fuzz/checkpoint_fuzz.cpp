// Fuzz target: the checkpoint reader (train/checkpoint/checkpoint.h, checkpoint_verify.h,
// saved_model.h) on arbitrary file bytes: verification, the resume checks and the tools' model
// load.
//
// Input: the checkpoint file. As with shard_fuzz.cpp, most mutations break HDF5's structures;
// checkpoint_fields_fuzz.cpp changes what a well-formed file holds instead. The seeds are a valid
// checkpoint of each format read (seed-valid-checkpoint-4, and seed-valid-checkpoint of format 3,
// written by an earlier version; train/checkpoint/checkpoint_format.h).
#include <cstdint>
#include <string_view>

#include "tests/fuzz/checkpoint_read.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const strata::fuzz::InputFile file(std::string_view(reinterpret_cast<const char*>(data), size),
                                     "step_00000001.h5");
  strata::fuzz::read_checkpoint_file(file.path(), strata::ModelConfig{1, 1, 8, 4, 16, {}, {}});
  return 0;
}
