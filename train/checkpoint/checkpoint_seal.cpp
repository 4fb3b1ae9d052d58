#include "train/checkpoint/checkpoint_seal.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "model/core/error.h"

namespace strata {
namespace {

// The magic of each format's seal: the seal's first bytes say which checksum the rest carries.
constexpr char kMagicFormat3[16] = "strata-seal-1\n";
constexpr char kMagicFormat4[16] = "strata-seal-2\n";
static_assert(sizeof kMagicFormat3 == sizeof kMagicFormat4);
constexpr std::uint64_t kMagicBytes = sizeof kMagicFormat4;

const char* magic_of(CheckpointFormat format) {
  return format == CheckpointFormat::v3 ? kMagicFormat3 : kMagicFormat4;
}
constexpr std::uint64_t kMiB = 1 << 20;

// The user block, little-endian (the machines Strata runs on): magic, the payload's length (the
// file past the user block), the block size, the block count, the header checksum (over the
// header with this field zero), then one checksum per block.
struct SealHeader {
  char magic[16];
  std::uint64_t payload_bytes;
  std::uint64_t block_bytes;
  std::uint64_t block_count;
  std::uint64_t header_checksum;
  std::uint64_t blocks[kSealBlocks];
};
static_assert(sizeof(SealHeader) <= kSealBytes);

std::uint64_t header_checksum(SealHeader header, CheckpointFormat format) {
  header.header_checksum = 0;
  return checksum_bytes(&header, sizeof header, format);
}

// Each block's checksum depends on its index too, so blocks that trade places do not pass.
std::uint64_t block_checksum(const std::vector<char>& bytes, std::uint64_t index,
                             CheckpointFormat format) {
  return checksum_bytes(bytes.data(), bytes.size(), format) ^ (index + 1) * 0x9E3779B97F4A7C15ull;
}

std::uint64_t block_bytes_for(std::uint64_t payload) {
  const std::uint64_t per_block = (payload + kSealBlocks - 1) / kSealBlocks;
  return std::max<std::uint64_t>(kMiB, (per_block + kMiB - 1) / kMiB * kMiB);
}

// Reads block `index` of the payload into `bytes` (resized to the block's length).
void read_block(std::ifstream& file, const std::string& path, const SealHeader& header,
                std::uint64_t index, std::vector<char>& bytes) {
  const std::uint64_t begin = index * header.block_bytes;
  bytes.resize(std::min(header.block_bytes, header.payload_bytes - begin));
  file.seekg(static_cast<std::streamoff>(kSealBytes + begin));
  file.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) fail("checkpoint '", path, "': cannot read bytes at ", kSealBytes + begin);
}

// The versions of files this process has found intact.
using FileVersion =
    std::tuple<std::string, std::uint64_t, std::int64_t, std::int64_t, std::uint64_t>;
std::mutex checked_mutex;
std::set<FileVersion> checked_files;

FileVersion version_of(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) fail("checkpoint '", path, "' does not exist");
  return {path, static_cast<std::uint64_t>(info.st_size), info.st_mtim.tv_sec, info.st_mtim.tv_nsec,
          static_cast<std::uint64_t>(info.st_ino)};
}

}  // namespace

void seal_checkpoint_file(const std::string& path, CheckpointFormat format) {
  const std::uint64_t size = std::get<1>(version_of(path));
  if (size < kSealBytes) fail("cannot seal '", path, "': it is shorter than its user block");
  SealHeader header{};
  std::memcpy(header.magic, magic_of(format), kMagicBytes);
  header.payload_bytes = size - kSealBytes;
  header.block_bytes = block_bytes_for(header.payload_bytes);
  header.block_count = (header.payload_bytes + header.block_bytes - 1) / header.block_bytes;
  {
    std::ifstream file(path, std::ios::binary);
    if (!file) fail("cannot seal '", path, "': cannot open it");
    std::vector<char> bytes;
    for (std::uint64_t b = 0; b < header.block_count; ++b) {
      read_block(file, path, header, b, bytes);
      header.blocks[b] = block_checksum(bytes, b, format);
    }
  }
  header.header_checksum = header_checksum(header, format);
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  file.write(reinterpret_cast<const char*>(&header), sizeof header);
  file.flush();
  if (!file) fail("cannot seal '", path, "': cannot write its first bytes");
}

void check_checkpoint_seal(const std::string& path) {
  const FileVersion version = version_of(path);
  {
    const std::lock_guard lock(checked_mutex);
    if (checked_files.count(version)) return;
  }
  const std::uint64_t size = std::get<1>(version);
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot open checkpoint '", path, "'");
  SealHeader header{};
  file.read(reinterpret_cast<char*>(&header),
            static_cast<std::streamsize>(std::min<std::uint64_t>(size, sizeof header)));
  // A file cut short (a copy or a write that never finished) is named as such, not as a stranger:
  // empty, or its magic intact and less than the seal after it.
  if (size == 0) fail("checkpoint '", path, "' is truncated: it is empty");
  std::optional<CheckpointFormat> format;
  for (CheckpointFormat f : {CheckpointFormat::v4, CheckpointFormat::v3})
    if (size >= kMagicBytes && std::memcmp(header.magic, magic_of(f), kMagicBytes) == 0) format = f;
  if (format && size < kSealBytes)
    fail("checkpoint '", path, "' is truncated: it holds ", size, " bytes, less than its ",
         kSealBytes, "-byte seal");
  if (!format)
    fail("'", path, "' is not a Strata checkpoint of format ", accepted_checkpoint_formats(),
         " (it does not begin with a checkpoint seal)");
  if (header.header_checksum != header_checksum(header, *format) ||
      header.block_count > kSealBlocks || header.block_bytes == 0 ||
      header.block_count != (header.payload_bytes + header.block_bytes - 1) / header.block_bytes)
    fail("checkpoint '", path, "' is damaged: its seal (the first ", kSealBytes,
         " bytes) fails its own checksum");
  if (size - kSealBytes != header.payload_bytes)
    fail("checkpoint '", path, "' is ",
         size < kSealBytes + header.payload_bytes ? "truncated" : "damaged", ": it holds ", size,
         " bytes, its seal records ", kSealBytes + header.payload_bytes);
  std::vector<char> bytes;
  for (std::uint64_t b = 0; b < header.block_count; ++b) {
    read_block(file, path, header, b, bytes);
    if (block_checksum(bytes, b, *format) != header.blocks[b]) {
      const std::uint64_t begin = kSealBytes + b * header.block_bytes;
      fail("checkpoint '", path, "' is damaged: bytes ", begin, " to ", begin + bytes.size(),
           " do not match its seal");
    }
  }
  const std::lock_guard lock(checked_mutex);
  checked_files.insert(version);
}

}  // namespace strata
