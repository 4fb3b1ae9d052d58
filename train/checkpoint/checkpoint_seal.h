// The seal of a checkpoint file (docs/ARCHITECTURE.md §5 "Checkpoints").
//
// A checkpoint's first kSealBytes bytes are an HDF5 user block: bytes HDF5 reserves for the
// application and never reads. Once every writer has finished, rank 0 fills it with a record of the
// rest of the file: its length and a checksum of each of its blocks (at most kSealBlocks blocks of
// a whole number of MiB each), itself checksummed. Every reader checks the seal before HDF5 parses
// a byte, so damage anywhere, in a tensor or in HDF5's own structures, is one strata::Error naming
// the file and the damaged byte range, where HDF5 1.10 would otherwise read damaged structures
// and could crash (as fuzzing found; docs/FUZZING.md). A file without a seal (not a Strata
// checkpoint, or one of a format before strata-checkpoint-3) is refused before HDF5 opens it.
//
// The seal's magic names its checksum (checkpoint_format.h): "strata-seal-2" XXH3-64, written
// with formats 4 and 5; "strata-seal-1" format 3's own mix, still checked so its files resume.
//
// The check reads the whole file once; a process remembers the files it has checked (by path,
// size, modification time and inode) and checks each version of a file once.
#pragma once

#include <cstdint>
#include <string>

#include "train/checkpoint/checkpoint_format.h"

namespace strata {

inline constexpr std::uint64_t kSealBytes = 4096;  // the user block: a power of two >= 512
inline constexpr std::uint64_t kSealBlocks = 500;

// Writes the seal of a complete checkpoint file that HDF5 created with a kSealBytes user block
// and has closed, with the checksum of `format` (an earlier one only to make test files).
void seal_checkpoint_file(const std::string& path,
                          CheckpointFormat format = kCurrentCheckpointFormat);

// strata::Error "checkpoint '<path>' ..." when the file has no intact seal or does not match it.
void check_checkpoint_seal(const std::string& path);

}  // namespace strata
