// An input file read as a stream of bytes, decompressed on the fly by its name: `.gz` is gzip
// (zlib's inflate), `.zst` is Zstandard (libzstd's ZSTD_decompressStream), anything else is read
// as it is. Memory is a fixed input buffer plus the decoder's state (zstd's window: at most
// 128 MB, libzstd's default limit), whatever the size of the file.
//
// Concatenations are one stream, as the command-line tools read them: a gzip file of several
// members (`cat a.gz b.gz`, pigz, bgzip) and a zstd file of several frames (`zstd` on many
// inputs, skippable frames) decompress to the concatenation of their parts.
//
// Damaged input never ends quietly: corrupt compressed data (a bad header, block or checksum:
// gzip's CRC-32 and length, zstd's content checksum when the frame has one) and a file that ends
// inside a gzip member or zstd frame are strata::Error naming the file and the compressed byte
// offset where it went wrong, so a truncated download cannot become a silently shorter corpus.
// An empty compressed file (0 bytes) is an empty stream, reported by the reader above as an
// empty input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace strata {

enum class Compression { none, gzip, zstd };

// By the last suffix of `path`: ".gz" gzip, ".zst" zstd, otherwise none.
Compression compression_of(const std::string& path);

// The file name without its compression suffix ("a.jsonl.zst" -> "a.jsonl").
std::string without_compression_suffix(const std::string& path);

class CompressedStream {
 public:
  // Opens `path`. strata::Error naming it when it is missing, a directory or unreadable.
  explicit CompressedStream(const std::string& path);
  ~CompressedStream();
  CompressedStream(const CompressedStream&) = delete;
  CompressedStream& operator=(const CompressedStream&) = delete;

  // Writes up to `capacity` bytes of the (decompressed) content to `buffer` and returns how many;
  // fewer than `capacity` only at the end of the content, 0 once it is reached.
  std::size_t read(char* buffer, std::size_t capacity);

  const std::string& path() const { return path_; }
  // Bytes of the file consumed so far (compressed bytes for .gz/.zst): a file's progress.
  std::uint64_t file_bytes_read() const;

  class Decoder;  // one per Compression, in compressed_stream.cpp

 private:
  std::string path_;
  std::unique_ptr<Decoder> decoder_;
};

}  // namespace strata
