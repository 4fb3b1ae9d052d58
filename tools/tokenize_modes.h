// tokenize's modes besides tokenizing text (tools/tokenize.cpp parses the command line and calls
// one of them): verifying shards.
#pragma once

#include <string>

namespace strata {

// tokenize --verify DIR (tools/tokenize_verify.cpp): checks every chunk of every shard of DIR
// (a corpus folder: its train/ and val/; else a split: a shard, a folder of shards or a glob)
// against its checksum and the vocabulary, writing nothing. One `error:` line on stderr per
// failing chunk, a `note:` for shards without checksums, and a summary on stdout; returns the exit
// status: 1 when a chunk fails, else 0.
int verify_shards(const std::string& dir);

}  // namespace strata
