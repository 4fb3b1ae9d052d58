// The checkpoint formats Strata reads and the checksums that tell them apart
// (docs/ARCHITECTURE.md §5 "Checkpoints").
//
// Three formats are read; a checkpoint is written in the oldest one that holds what it stores:
//   strata-checkpoint-5  format 4 plus optional per-tensor state buffers (checkpoint.h
//                        StateBuffer::optional: the FP8 delayed recipe's amax histories), written
//                        only by runs that keep such state, so that versions before format 5
//                        refuse the file rather than resume without it, and read every other
//                        checkpoint as before. (The versions between the histories' arrival and
//                        format 5 wrote them into format-4 files: readers look for optional
//                        buffers in any format.)
//   strata-checkpoint-4  xxHash's XXH3-64 byte checksums (libxxhash)
//   strata-checkpoint-3  the byte checksum a word-wise mix of Strata's own, kept here for reading,
//                        so that runs checkpointed by earlier versions resume
// Formats 3 and 4 differ only in their byte checksum (the seal's blocks and header, the tokenizer
// bytes); 5 has 4's. The per-tensor checksum of fp32 values (checksum_slice) is the same in all:
// it must be a sum of per-element terms, so that each writer adds the share of the slices it
// wrote, which a hash of a byte stream such as XXH3 cannot give.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/parameter_layout.h"  // TensorSlice

namespace strata {

enum class CheckpointFormat { v3, v4, v5 };
inline constexpr CheckpointFormat kCurrentCheckpointFormat = CheckpointFormat::v5;

// The format a checkpoint is written in: 5 when it stores an optional state buffer, else 4.
CheckpointFormat checkpoint_format_to_write(bool has_optional_buffers);

// "strata-checkpoint-3", "-4", "-5": the root attribute `format`.
const char* checkpoint_format_name(CheckpointFormat format);
// The format of attribute value `name`; nullopt for any other text.
std::optional<CheckpointFormat> checkpoint_format_named(std::string_view name);
// "strata-checkpoint-5, strata-checkpoint-4 or strata-checkpoint-3", for errors that refuse a
// file.
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
