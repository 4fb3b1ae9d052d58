// tokenize's two modes besides tokenizing text (tools/tokenize.cpp parses the command line and
// calls one of them): converting other trainers' token files, and verifying shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_files.h"

namespace strata {

struct TokenFilesOptions {
  std::vector<std::string> inputs;  // files, or directories standing for their files
  TokenFileFormat format = TokenFileFormat::llmc;
  int vocab_size = 0;
  int eos_id = -1;
  std::string out;
  double val_fraction = 0.05;
  std::uint64_t shard_tokens = 100'000'000;
  bool force = false;
};

// tokenize --from-tokens FILE... --format F --vocab-size N --eos-id ID --out DIR
// (tools/tokenize_from_tokens.cpp): DIR/train and DIR/val as tokenize writes them from text, cut
// into documents at the EOS id (data/token_files.h), with tokenizer_sha256 "none" and no
// tokenizer.model. One summary line on stdout; strata::Error on bad input, before any output.
void convert_token_files(const TokenFilesOptions& options);

// tokenize --verify DIR (tools/tokenize_verify.cpp): checks every chunk of every shard of DIR
// (a corpus folder: its train/ and val/; else a split: a shard, a folder of shards or a glob)
// against its checksum and the vocabulary, writing nothing. One `error:` line on stderr per
// failing chunk, a `note:` for shards without checksums, and a summary on stdout; returns the exit
// status: 1 when a chunk fails, else 0.
int verify_shards(const std::string& dir);

}  // namespace strata
