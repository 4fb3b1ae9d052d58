#include "data/line_reader.h"

#include <cstring>

namespace strata {
namespace {

constexpr std::size_t kInitialBufferBytes = std::size_t{1} << 20;

}  // namespace

LineReader::LineReader(CompressedStream& stream) : stream_(stream), buffer_(kInitialBufferBytes) {}

bool LineReader::next(std::string_view& line) {
  std::size_t scanned = begin_;  // no '\n' in [begin_, scanned)
  while (true) {
    const void* found = std::memchr(buffer_.data() + scanned, '\n', end_ - scanned);
    if (found != nullptr || (at_end_ && begin_ < end_)) {
      const std::size_t stop =
          found != nullptr
              ? static_cast<std::size_t>(static_cast<const char*>(found) - buffer_.data())
              : end_;
      line = std::string_view(buffer_.data() + begin_, stop - begin_);
      offset_ = buffer_offset_ + begin_;
      had_newline_ = found != nullptr;
      begin_ = had_newline_ ? stop + 1 : stop;
      ++line_number_;
      return true;
    }
    if (at_end_) return false;
    // The line continues past the buffer: move it to the front, grow if it fills the buffer.
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      buffer_offset_ += begin_;
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    scanned = end_;
    const std::size_t got = stream_.read(buffer_.data() + end_, buffer_.size() - end_);
    end_ += got;
    at_end_ = got == 0;
  }
}

}  // namespace strata
