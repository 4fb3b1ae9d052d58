// The checkpoint formats Strata reads and the checksums that tell them apart
// (docs/ARCHITECTURE.md §5 "Checkpoints").
//
// Checkpoints are written as strata-checkpoint-4. Files of strata-checkpoint-3 are still read, so
// that runs checkpointed by earlier versions resume. The two differ only in their byte checksum
// (the seal's blocks and header, the tokenizer bytes): format 4 uses xxHash's XXH3-64
// (libxxhash), format 3 a word-wise mix of Strata's own, kept here for reading. The per-tensor
// checksum of fp32 values (checksum_slice) is the same in both: it must be a sum of per-element
// terms, so that each writer adds the share of the slices it wrote, which a hash of a byte stream
// such as XXH3 cannot give.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/parameter_layout.h"  // TensorSlice

namespace strata {

enum class CheckpointFormat { v3, v4 };
inline constexpr CheckpointFormat kCurrentCheckpointFormat = CheckpointFormat::v4;
inline constexpr const char* kCheckpointFormat = "strata-checkpoint-4";  // what is written

// "strata-checkpoint-3", "strata-checkpoint-4": the root attribute `format`.
const char* checkpoint_format_name(CheckpointFormat format);
// The format of attribute value `name`; nullopt for any other text.
std::optional<CheckpointFormat> checkpoint_format_named(std::string_view name);
// "strata-checkpoint-4 or strata-checkpoint-3", for errors that refuse a file.
std::string accepted_checkpoint_formats();

// 64-bit checksum of a byte range in `format`'s byte checksum (detects corruption, not tampering).
std::uint64_t checksum_bytes(const void* data, std::size_t bytes,
                             CheckpointFormat format = kCurrentCheckpointFormat);

// Share of a tensor's checksum held by its local elements [first, first + count) (of `slice`),
// `values` pointing at element `first`: the wrapping sum over them of a hash of (logical index,
// value bits), the same in every format.
std::uint64_t checksum_slice(const float* values, const TensorSlice& slice, std::int64_t first,
                             std::int64_t count);

}  // namespace strata
