// XXH3-64 through libxxhash's streaming state, so a writer hashes each chunk as its ids arrive and
// never holds one whole.
#include "data/shard_checksums.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstdio>

#include "data/hdf5_handle.h"
#include "model/core/error.h"

namespace strata {

// The checksums are defined on the file's little-endian bytes and hashed from memory.
static_assert(
    std::endian::native == std::endian::little,
    "shard checksums hash ids as they lie in memory: a big-endian host would need a swap");

struct ChunkChecksummer::HashState {
  HashState() : state(XXH3_createState()) {
    if (state == nullptr) fail("cannot allocate an XXH3 hash state");
  }
  ~HashState() { XXH3_freeState(state); }
  HashState(const HashState&) = delete;
  HashState& operator=(const HashState&) = delete;
  XXH3_state_t* state;
};

std::uint64_t token_chunk_checksum(const void* tokens, std::size_t count, std::size_t token_bytes) {
  // XXH3 reads nothing for 0 bytes, so a null `tokens` is fine there.
  return XXH3_64bits(tokens, count * token_bytes);
}

ChunkChecksummer::ChunkChecksummer(std::uint64_t chunk_tokens, std::size_t token_bytes)
    : chunk_tokens_(chunk_tokens),
      token_bytes_(token_bytes),
      state_(std::make_unique<HashState>()) {
  STRATA_CHECK(chunk_tokens_ > 0 && (token_bytes_ == 2 || token_bytes_ == 4));
  XXH3_64bits_reset(state_->state);
}

ChunkChecksummer::ChunkChecksummer(ChunkChecksummer&&) noexcept = default;
ChunkChecksummer& ChunkChecksummer::operator=(ChunkChecksummer&&) noexcept = default;
ChunkChecksummer::~ChunkChecksummer() = default;

void ChunkChecksummer::add(const void* tokens, std::size_t count) {
  const auto* bytes = static_cast<const unsigned char*>(tokens);
  while (count > 0) {
    const std::size_t take =
        static_cast<std::size_t>(std::min<std::uint64_t>(count, chunk_tokens_ - in_chunk_));
    XXH3_64bits_update(state_->state, bytes, take * token_bytes_);
    bytes += take * token_bytes_;
    count -= take;
    in_chunk_ += take;
    if (in_chunk_ == chunk_tokens_) {
      checksums_.push_back(XXH3_64bits_digest(state_->state));
      XXH3_64bits_reset(state_->state);
      in_chunk_ = 0;
    }
  }
}

std::vector<std::uint64_t> ChunkChecksummer::finish() {
  if (in_chunk_ > 0) checksums_.push_back(XXH3_64bits_digest(state_->state));
  in_chunk_ = 0;
  return std::move(checksums_);
}

void write_shard_checksums(hid_t file, std::span<const std::uint64_t> checksums,
                           std::uint64_t chunk_tokens) {
  const std::uint64_t count = checksums.size();
  write_dataset<std::uint64_t>(file, "checksums", checksums,
                               std::span<const std::uint64_t>(&count, 1));
  const H5Id dataset = open_dataset(file, "checksums");
  write_attribute_i64(dataset.get(), "chunk_tokens", static_cast<std::int64_t>(chunk_tokens));
  write_attribute_string(dataset.get(), "algorithm", kChecksumAlgorithm);
}

std::optional<ShardChecksums> read_shard_checksums(hid_t file, std::uint64_t tokens,
                                                   std::size_t token_bytes) {
  if (!has_object(file, "checksums")) return std::nullopt;
  const H5Id dataset = open_dataset(file, "checksums");
  if (const std::string algorithm = read_attribute_string(dataset.get(), "algorithm");
      algorithm != kChecksumAlgorithm)
    fail("/checksums uses algorithm '", algorithm, "', this reader knows '", kChecksumAlgorithm,
         "'");
  const std::int64_t chunk = read_attribute_i64(dataset.get(), "chunk_tokens");
  if (chunk <= 0 || static_cast<std::uint64_t>(chunk) > kMaxChecksumChunkTokens)
    fail("/checksums has chunk_tokens ", chunk, ", outside [1, ", kMaxChecksumChunkTokens, "]");
  if (token_bytes != 2 && token_bytes != 4)
    fail("/checksums needs /tokens of 2 or 4 bytes per id, it has ", token_bytes);
  ShardChecksums checksums;
  checksums.chunk_tokens = static_cast<std::uint64_t>(chunk);
  const std::vector<std::uint64_t> dims = dataset_dims(dataset.get());
  const std::uint64_t chunks = (tokens + checksums.chunk_tokens - 1) / checksums.chunk_tokens;
  if (dims.size() != 1 || dims[0] != chunks)
    fail("/checksums holds ", dims.empty() ? 0 : dims[0], " checksums, expected ", chunks,
         " (one per ", chunk, " of ", tokens, " tokens)");
  if (dataset_type_class(dataset.get()) != H5T_INTEGER || dataset_element_bytes(dataset.get()) != 8)
    fail("/checksums is not a dataset of 64-bit integers");
  checksums.values = read_dataset<std::uint64_t>(file, "checksums");
  return checksums;
}

std::string checksum_hex(std::uint64_t checksum) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

}  // namespace strata
