// Per-chunk checksums of a token shard's ids (docs/ARCHITECTURE.md §5 "Token shards", a
// contract): ids altered within the vocabulary pass every range check, and only a checksum of
// what tokenize wrote tells them from the real ones.
//
// A shard's /checksums dataset (1-D, uint64) holds one checksum per chunk of `chunk_tokens` ids
// (its attribute; tokenize writes kChecksumChunkTokens): checksum k is xxHash's XXH3-64 (seed 0,
// libxxhash) of ids [k·chunk_tokens, min((k+1)·chunk_tokens, n)) as /tokens stores them, i.e.
// their little-endian bytes, 2 per id in a uint16 shard and 4 in a uint32 one. Its attribute
// `algorithm` is "xxh3-64". Shards written before checksums existed have no /checksums and are
// read as before (TokenSource says which).
//
// The chunk is /tokens' own storage chunk (kShardChunkTokens), so checking one costs one chunk
// read: a reader checks a chunk the first time it reads from it (token_shards.h), and a training
// window pays at most two such reads once per process.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace strata {

inline constexpr std::uint64_t kChecksumChunkTokens = 65536;
// A reader refuses larger chunks: checking one reads it whole, whatever a damaged file claims.
inline constexpr std::uint64_t kMaxChecksumChunkTokens = std::uint64_t{1} << 22;
inline constexpr const char* kChecksumAlgorithm = "xxh3-64";

// XXH3-64 of `count` ids of `token_bytes` bytes each (2 or 4), as they lie in memory (this
// little-endian host's bytes are the file's).
std::uint64_t token_chunk_checksum(const void* tokens, std::size_t count, std::size_t token_bytes);

// The checksums of a stream of ids appended in pieces of any size: a chunk's checksum is complete
// when its last id arrives. Move-only.
class ChunkChecksummer {
 public:
  ChunkChecksummer(std::uint64_t chunk_tokens, std::size_t token_bytes);
  ChunkChecksummer(ChunkChecksummer&&) noexcept;
  ChunkChecksummer& operator=(ChunkChecksummer&&) noexcept;
  ~ChunkChecksummer();

  void add(const void* tokens, std::size_t count);
  // Every chunk's checksum, the last (partial) one included; the checksummer is spent.
  std::vector<std::uint64_t> finish();

 private:
  struct HashState;
  std::uint64_t chunk_tokens_;
  std::size_t token_bytes_;
  std::uint64_t in_chunk_ = 0;  // ids of the current chunk hashed so far
  std::unique_ptr<HashState> state_;
  std::vector<std::uint64_t> checksums_;
};

// Writes /checksums with its attributes into the open shard `file`.
void write_shard_checksums(hid_t file, std::span<const std::uint64_t> checksums,
                           std::uint64_t chunk_tokens);

struct ShardChecksums {
  std::uint64_t chunk_tokens = 0;
  std::vector<std::uint64_t> values;  // one per chunk
};

// The shard's checksums for its `tokens` ids of `token_bytes` bytes each; nullopt when it has
// none (written before they existed). strata::Error when they are malformed: another algorithm, a
// chunk size out of (0, kMaxChecksumChunkTokens], or not one checksum per chunk.
std::optional<ShardChecksums> read_shard_checksums(hid_t file, std::uint64_t tokens,
                                                   std::size_t token_bytes);

// "0x0123456789abcdef": a checksum in messages.
std::string checksum_hex(std::uint64_t checksum);

}  // namespace strata
