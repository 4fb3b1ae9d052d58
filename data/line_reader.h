// The lines of a CompressedStream, one at a time. Memory is one buffer that holds the longest line
// seen (at least 1 MiB), never the whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/compressed_stream.h"

namespace strata {

class LineReader {
 public:
  // `stream` is not owned and must outlive the reader.
  explicit LineReader(CompressedStream& stream);

  // The next line without its '\n' (a '\r' before it stays); false after the last line. A final
  // line without '\n' is a line; content that ends with '\n' has no empty line after it. The view
  // stays valid until the next call.
  bool next(std::string_view& line);

  bool had_newline() const { return had_newline_; }         // the last line ended with '\n'
  std::uint64_t line_offset() const { return offset_; }     // its first byte's content offset
  std::size_t line_number() const { return line_number_; }  // from 1
  std::uint64_t content_bytes() const { return buffer_offset_ + end_; }  // read so far

 private:
  CompressedStream& stream_;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;  // the next line starts here
  std::size_t end_ = 0;    // bytes in the buffer
  bool at_end_ = false;
  std::uint64_t buffer_offset_ = 0;  // content offset of buffer_[0]
  std::uint64_t offset_ = 0;
  std::size_t line_number_ = 0;
  bool had_newline_ = false;
};

}  // namespace strata
