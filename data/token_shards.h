// Token shards (docs/ARCHITECTURE.md §5 "Token shards", a contract) and the token stream of a
// split.
//
// A shard is an HDF5 file with
//   /tokens          1-D dataset of token ids: uint16 when vocab_size <= 65536, else uint32;
//                    chunked in kShardChunkTokens so reading a window touches at most two chunks;
//                    documents are separated by (each followed by) the EOS id.
//   /checksums       1-D uint64, one XXH3-64 per chunk of ids (data/shard_checksums.h); absent
//                    in shards written before checksums existed, which are read unchecked.
//   root attributes  vocab_size (int64), eos_id (int64), tokenizer_sha256 (string, 64 hex digits:
//                    SHA-256 of the tokenizer .model file that produced the ids, or kNoTokenizer
//                    for ids converted from another trainer's token files without one).
// Shards are written to "<path>.tmp" and renamed, so a shard that exists is complete.
//
// A TokenSource checks a checksum chunk the first time it reads from it (then remembers it), so a
// process pays one extra read of each chunk it samples and nothing for the rest; ids altered
// after tokenize wrote them stop the read with an error naming the shard, the chunk and its ids.
//
// A split is a file, a directory (every *.h5 inside, sorted by name) or a glob pattern (matches
// sorted by name); its shards, in that order, form one stream of tokens indexed from 0. All shards
// of a split must agree on the three attributes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/shard_checksums.h"

namespace strata {

inline constexpr std::uint64_t kShardChunkTokens = 65536;  // 128 KiB of uint16 per chunk
// A reader refuses shards in larger chunks (HDF5 would allocate whole chunks to read a window).
inline constexpr std::uint64_t kMaxShardChunkBytes = 64ull << 20;
// tokenizer_sha256 of shards whose ids came without a tokenizer (tokenize --from-tokens): train
// and eval take their ids, generate has no text to give.
inline constexpr const char* kNoTokenizer = "none";

struct ShardInfo {
  int vocab_size = 0;
  int eos_id = -1;
  std::string tokenizer_sha256;

  bool operator==(const ShardInfo&) const = default;
};

// strata::Error if a token is outside [0, vocab_size) or the file cannot be written.
void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens,
                       const ShardInfo& info);

// Writes one shard incrementally, in bounded memory: tokens are appended to "<path>.tmp";
// finish() writes the attributes and renames it to `path`. A writer destroyed before finish()
// (e.g. by an exception) removes its temporary file. Move-only.
class TokenShardWriter {
 public:
  TokenShardWriter(std::string path, ShardInfo info);
  TokenShardWriter(TokenShardWriter&&) noexcept = default;
  TokenShardWriter& operator=(TokenShardWriter&&) noexcept = default;
  ~TokenShardWriter();

  // strata::Error if a token is outside [0, vocab_size).
  void append(std::span<const std::int32_t> tokens);
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void finish();

 private:
  std::string path_;
  ShardInfo info_;
  std::unique_ptr<H5File> file_;  // null once finished
  H5Id tokens_;
  std::uint64_t size_ = 0;
  std::optional<ChunkChecksummer> checksums_;
  std::vector<std::uint16_t> narrow_;  // conversion buffers, reused across appends
  std::vector<std::uint32_t> wide_;
};

// The token stream of a split. Keeps every shard open (read-only) for its lifetime. Move-only.
// read() is const and may be called from several threads (HDF5 serialises them internally).
class TokenSource {
 public:
  // strata::Error when nothing matches `spec`, a file is unreadable or not a token shard, or the
  // shards disagree on their attributes.
  static TokenSource open(const std::string& spec);

  std::uint64_t size() const { return offsets_.back(); }
  const ShardInfo& info() const { return info_; }
  const std::vector<std::string>& files() const { return files_; }

  // Copies tokens [start, start + count) of the stream into `out` as int32, reading only that range
  // (across shard boundaries as needed). strata::Error if the range exceeds size() or a token read
  // is outside [0, vocab_size) or a chunk read for the first time fails its checksum (a corrupt
  // shard).
  void read(std::uint64_t start, std::size_t count, std::int32_t* out) const;

  // Shard by shard, for `tokenize --verify`: shard k's checksum chunks (of kShardChunkTokens ids
  // when it has no checksums), and one chunk's check: its checksum when the shard has them, and
  // its ids against the vocabulary. strata::Error naming the file, the chunk and its ids.
  std::size_t shard_count() const { return shards_.size(); }
  bool has_checksums(std::size_t shard) const { return shards_[shard].checksums.has_value(); }
  std::uint64_t chunk_count(std::size_t shard) const;
  void check_chunk(std::size_t shard, std::uint64_t chunk) const;
  // The shard files that have no checksums.
  std::size_t files_without_checksums() const;

 private:
  struct Shard {
    H5File file;
    H5Id tokens;
    std::uint64_t size = 0;
    std::size_t token_bytes = 0;
    std::optional<ShardChecksums> checksums;
    // Which checksum chunks this process has checked: read() checks each once.
    std::unique_ptr<std::atomic<bool>[]> checked;
  };
  std::uint64_t chunk_tokens(const Shard& shard) const;
  TokenSource() = default;

  std::vector<std::string> files_;
  std::vector<Shard> shards_;
  std::vector<std::uint64_t> offsets_{
      0};  // shard k holds stream tokens [offsets_[k], offsets_[k+1])
  ShardInfo info_;
};

// The shard files `spec` names, sorted (see above); strata::Error if there are none.
std::vector<std::string> resolve_shard_files(const std::string& spec);

// strata::Error naming `what` (a key or flag: "data.val", "--data") when the shards record the
// tokenizer they were made with and it is not the one whose model bytes hash to
// `tokenizer_sha256`: ids of another vocabulary would give a loss that means nothing. Shards
// without the attribute and an empty digest (a run without a tokenizer) are not checked.
void check_shards_tokenizer(const TokenSource& shards, const std::string& tokenizer_sha256,
                            const std::string& what);

// One `note:` line for the user when shards of `splits` (key or flag, split) have no checksums,
// naming the keys and saying how to add them; "" when every shard has them.
std::string missing_checksums_note(
    const std::vector<std::pair<std::string, const TokenSource*>>& splits);

}  // namespace strata
