// Three decoders behind one interface. Each reads the file through a 1 MiB buffer (File); the
// compressed ones track how much of it they have consumed, so an error can say where the damage
// is. zlib and libzstd are Debian's (zlib1g-dev, libzstd-dev).
#include "data/compressed_stream.h"

#include <fcntl.h>
#include <unistd.h>
#define ZLIB_CONST  // next_in points at const bytes
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "model/core/error.h"

namespace strata {
namespace {

constexpr std::size_t kFileBufferBytes = std::size_t{1} << 20;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A file descriptor with a read buffer: `data()`/`size()` are the bytes read but not consumed.
class File {
 public:
  explicit File(const std::string& path) : path_(path), buffer_(kFileBufferBytes) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      fail("cannot read '", path, "': it is a directory");
    descriptor_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (descriptor_ < 0) fail("cannot open '", path, "': ", std::strerror(errno));
    // Read once, front to back: the kernel may read ahead more and keep less.
    (void)::posix_fadvise(descriptor_, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  ~File() { ::close(descriptor_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Refills the buffer when it is consumed; false at the end of the file.
  bool fill() {
    if (begin_ < end_) return true;
    if (at_end_) return false;
    begin_ = 0;
    end_ = 0;
    while (true) {
      const ssize_t got = ::read(descriptor_, buffer_.data(), buffer_.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("cannot read '", path_, "': ", std::strerror(errno));
      end_ = static_cast<std::size_t>(got);
      at_end_ = got == 0;
      return !at_end_;
    }
  }
  // Reads straight into `out` when the buffer is empty (plain files need no copy).
  std::size_t read_into(char* out, std::size_t capacity) {
    if (begin_ == end_ && !at_end_) {
      while (true) {
        const ssize_t got = ::read(descriptor_, out, capacity);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail("cannot read '", path_, "': ", std::strerror(errno));
        at_end_ = got == 0;
        offset_ += static_cast<std::uint64_t>(got);
        return static_cast<std::size_t>(got);
      }
    }
    const std::size_t n = std::min(capacity, end_ - begin_);
    std::memcpy(out, buffer_.data() + begin_, n);
    consume(n);
    return n;
  }

  const char* data() const { return buffer_.data() + begin_; }
  std::size_t size() const { return end_ - begin_; }
  void consume(std::size_t n) {
    begin_ += n;
    offset_ += n;
  }
  std::uint64_t offset() const { return offset_; }  // bytes of the file consumed
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int descriptor_ = -1;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  bool at_end_ = false;
  std::uint64_t offset_ = 0;
};

}  // namespace

class CompressedStream::Decoder {
 public:
  explicit Decoder(const std::string& path) : file_(path) {}
  virtual ~Decoder() = default;
  virtual std::size_t read(char* out, std::size_t capacity) = 0;
  std::uint64_t file_bytes_read() const { return file_.offset(); }

 protected:
  File file_;
};

namespace {

class PlainDecoder final : public CompressedStream::Decoder {
 public:
  using Decoder::Decoder;
  std::size_t read(char* out, std::size_t capacity) override {
    std::size_t done = 0;
    while (done < capacity) {
      const std::size_t got = file_.read_into(out + done, capacity - done);
      if (got == 0) break;
      done += got;
    }
    return done;
  }
};

// gzip members, one after another: after each member's end (its CRC-32 and length checked by
// inflate) the next byte, if any, must start another member.
class GzipDecoder final : public CompressedStream::Decoder {
 public:
  explicit GzipDecoder(const std::string& path) : Decoder(path) {
    // 15 + 16: the largest window, gzip wrapper only (a zlib or raw deflate stream is an error).
    if (inflateInit2(&stream_, 15 + 16) != Z_OK)
      fail("cannot start a gzip decoder for '", path, "'");
  }
  ~GzipDecoder() override { inflateEnd(&stream_); }

  std::size_t read(char* out, std::size_t capacity) override {
    stream_.next_out = reinterpret_cast<Bytef*>(out);
    stream_.avail_out = static_cast<uInt>(std::min<std::size_t>(capacity, 1u << 30));
    while (stream_.avail_out > 0) {
      if (!file_.fill()) {
        if (in_member_)
          fail("input file '", file_.path(),
               "' is truncated: its gzip data end inside a member, after ", file_.offset(),
               " compressed bytes");
        break;
      }
      stream_.next_in = reinterpret_cast<const Bytef*>(file_.data());
      stream_.avail_in = static_cast<uInt>(file_.size());
      in_member_ = true;
      const int status = inflate(&stream_, Z_NO_FLUSH);
      file_.consume(file_.size() - stream_.avail_in);
      if (status == Z_STREAM_END) {
        in_member_ = false;
        inflateReset(&stream_);
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        // inflate stops where it found the damage, give or take the few bytes it reads ahead.
        fail("input file '", file_.path(), "' is corrupt: gzip data error near compressed byte ",
             file_.offset(), ": ", stream_.msg != nullptr ? stream_.msg : zError(status));
      }
    }
    return capacity - stream_.avail_out;
  }

 private:
  z_stream stream_{};
  bool in_member_ = false;  // bytes of a member have been given to inflate, its end not seen
};

// zstd frames, one after another: ZSTD_decompressStream returns 0 exactly when a frame is
// complete and flushed, and then starts the next one on its own.
class ZstdDecoder final : public CompressedStream::Decoder {
 public:
  explicit ZstdDecoder(const std::string& path) : Decoder(path), context_(ZSTD_createDCtx()) {
    if (context_ == nullptr) fail("cannot start a zstd decoder for '", path, "'");
  }
  ~ZstdDecoder() override { ZSTD_freeDCtx(context_); }

  std::size_t read(char* out, std::size_t capacity) override {
    ZSTD_outBuffer output{out, capacity, 0};
    while (output.pos < output.size) {
      const bool have_input = file_.fill();
      if (!have_input && !in_frame_) break;
      ZSTD_inBuffer input{file_.data(), file_.size(), 0};
      const std::size_t before = output.pos;
      const std::size_t status = ZSTD_decompressStream(context_, &output, &input);
      file_.consume(input.pos);
      if (ZSTD_isError(status)) {
        const bool window = ZSTD_getErrorCode(status) == ZSTD_error_frameParameter_windowTooLarge;
        fail("input file '", file_.path(), "' is corrupt: zstd data error near compressed byte ",
             file_.offset(), ": ", ZSTD_getErrorName(status),
             window ? " (written with --long or a window over 128 MB: decompress it first)" : "");
      }
      in_frame_ = status != 0;
      if (!have_input && in_frame_ && output.pos == before)
        fail("input file '", file_.path(),
             "' is truncated: its zstd data end inside a frame, after ", file_.offset(),
             " compressed bytes");
    }
    return output.pos;
  }

 private:
  ZSTD_DCtx* context_;
  bool in_frame_ = false;  // a frame has started and is not complete and flushed
};

}  // namespace

Compression compression_of(const std::string& path) {
  if (ends_with(path, ".gz")) return Compression::gzip;
  if (ends_with(path, ".zst")) return Compression::zstd;
  return Compression::none;
}

std::string without_compression_suffix(const std::string& path) {
  switch (compression_of(path)) {
    case Compression::gzip:
      return path.substr(0, path.size() - 3);
    case Compression::zstd:
      return path.substr(0, path.size() - 4);
    case Compression::none:
      break;
  }
  return path;
}

CompressedStream::CompressedStream(const std::string& path) : path_(path) {
  switch (compression_of(path)) {
    case Compression::gzip:
      decoder_ = std::make_unique<GzipDecoder>(path);
      break;
    case Compression::zstd:
      decoder_ = std::make_unique<ZstdDecoder>(path);
      break;
    case Compression::none:
      decoder_ = std::make_unique<PlainDecoder>(path);
      break;
  }
}

CompressedStream::~CompressedStream() = default;

std::size_t CompressedStream::read(char* buffer, std::size_t capacity) {
  return decoder_->read(buffer, capacity);
}

std::uint64_t CompressedStream::file_bytes_read() const { return decoder_->file_bytes_read(); }

}  // namespace strata
