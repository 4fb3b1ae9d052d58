#include "train/optimizer/chunked_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>

#include "model/core/error.h"
#include "plan/optimizer_state.h"

namespace strata {
namespace {

// none and host: each plane in a vector of its own.
class ArenaState final : public ChunkedState {
 public:
  ArenaState(std::size_t elements, std::vector<std::size_t> widths, std::size_t chunk)
      : ChunkedState(elements, std::move(widths), chunk) {
    for (const std::size_t w : widths_) planes_.emplace_back(elements * w, std::byte{0});
  }

  void visit(const Body& body, bool) override {
    for (std::size_t first = 0; first < elements_; first += chunk_) {
      Chunk c{first, std::min(chunk_, elements_ - first), {}};
      for (std::size_t p = 0; p < planes_.size(); ++p)
        c.planes[p] = planes_[p].data() + first * widths_[p];
      body(c);
    }
  }
  std::size_t resident_bytes() const override {
    return elements_ * std::accumulate(widths_.begin(), widths_.end(), std::size_t{0});
  }

 private:
  std::vector<std::vector<std::byte>> planes_;
};

// disk: chunk k of the file at k whole chunks' bytes, its planes one after another.
class FileState final : public ChunkedState {
 public:
  FileState(std::size_t elements, std::vector<std::size_t> widths, std::size_t chunk,
            const std::string& dir)
      : ChunkedState(elements, std::move(widths), chunk),
        stride_(chunk_buffer_bytes(chunk_, widths_)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {  // a file system without O_TMPFILE: a unique name, removed at once
      std::string path = (std::filesystem::path(dir) / "strata-optimizer-XXXXXX").string();
      fd_ = ::mkostemp(path.data(), O_CLOEXEC);
      if (fd_ >= 0) ::unlink(path.c_str());
    }
    if (fd_ < 0)
      fail("optimizer.offload_dir: cannot create the optimizer's state file in '", dir,
           "': ", std::strerror(errno));
    const std::size_t chunks = (elements + chunk_ - 1) / chunk_;
    const auto bytes = static_cast<off_t>(
        chunks == 0 ? 0 : (chunks - 1) * stride_ + chunk_buffer_bytes(last_count(chunks), widths_));
    if (::ftruncate(fd_, bytes) != 0)  // reads as zeros: the state's start
      fail("optimizer.offload_dir: cannot size the optimizer's state file in '", dir, "' to ",
           bytes, " bytes: ", std::strerror(errno));
    // 8-byte words, so that every plane starts aligned.
    for (std::vector<std::uint64_t>& b : buffers_)
      b.resize(chunk_buffer_bytes(std::min(chunk_, elements), widths_) / 8);
  }
  ~FileState() override { ::close(fd_); }

  void visit(const Body& body, bool read_only) override {
    const std::size_t chunks = (elements_ + chunk_ - 1) / chunk_;
    std::future<void> reading, writing[3];
    if (chunks > 0) reading = std::async(std::launch::async, [this] { transfer(0, 0, false); });
    for (std::size_t k = 0; k < chunks; ++k) {
      reading.get();
      if (k + 1 < chunks) {
        // Chunk k+1's buffer last held chunk k−2: its write must be done first.
        std::future<void>& previous = writing[(k + 1) % 3];
        if (previous.valid()) previous.get();
        reading =
            std::async(std::launch::async, [this, k] { transfer(k + 1, (k + 1) % 3, false); });
      }
      Chunk c{k * chunk_, std::min(chunk_, elements_ - k * chunk_), {}};
      auto* data = reinterpret_cast<std::byte*>(buffers_[k % 3].data());
      for (std::size_t p = 0; p < widths_.size(); ++p) {
        c.planes[p] = data;
        data += chunk_plane_bytes(c.count, widths_[p]);
      }
      body(c);
      if (!read_only)
        writing[k % 3] = std::async(std::launch::async, [this, k] { transfer(k, k % 3, true); });
    }
    for (std::future<void>& w : writing)
      if (w.valid()) w.get();
  }
  std::size_t resident_bytes() const override {
    return buffers_.size() * buffers_[0].size() * sizeof(std::uint64_t);
  }

 private:
  std::size_t last_count(std::size_t chunks) const { return elements_ - (chunks - 1) * chunk_; }

  // Reads chunk k into buffer b, or writes it from there.
  void transfer(std::size_t k, std::size_t b, bool write) {
    const std::size_t count = std::min(chunk_, elements_ - k * chunk_);
    auto* data = reinterpret_cast<char*>(buffers_[b].data());
    std::size_t left = chunk_buffer_bytes(count, widths_);
    auto at = static_cast<off_t>(k * stride_);
    while (left > 0) {
      const ssize_t n = write ? ::pwrite(fd_, data, left, at) : ::pread(fd_, data, left, at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        fail("optimizer.offload disk: cannot ", write ? "write" : "read",
             " the optimizer's state file: ", n < 0 ? std::strerror(errno) : "end of file");
      data += n;
      left -= static_cast<std::size_t>(n);
      at += n;
    }
  }

  std::size_t stride_;  // a whole chunk's bytes
  int fd_ = -1;
  std::array<std::vector<std::uint64_t>, 3> buffers_;
};

}  // namespace

ChunkedState::ChunkedState(std::size_t elements, std::vector<std::size_t> widths, std::size_t chunk)
    : elements_(elements), widths_(std::move(widths)), chunk_(std::max<std::size_t>(chunk, 1)) {
  STRATA_CHECK(widths_.size() <= kMaxPlanes, "ChunkedState: ", widths_.size(), " planes");
}

void ChunkedState::read_all(const std::vector<void*>& planes) {
  visit(
      [&](const Chunk& c) {
        for (std::size_t p = 0; p < widths_.size(); ++p)
          std::memcpy(static_cast<std::byte*>(planes[p]) + c.first * widths_[p], c.planes[p],
                      c.count * widths_[p]);
      },
      true);
}

void ChunkedState::write_all(const std::vector<const void*>& planes) {
  visit([&](const Chunk& c) {
    for (std::size_t p = 0; p < widths_.size(); ++p)
      std::memcpy(c.planes[p], static_cast<const std::byte*>(planes[p]) + c.first * widths_[p],
                  c.count * widths_[p]);
  });
}

std::unique_ptr<ChunkedState> ChunkedState::make(OptimizerOffload where, std::size_t elements,
                                                 std::vector<std::size_t> widths, std::size_t chunk,
                                                 const std::string& dir) {
  switch (where) {
    case OptimizerOffload::none:
      return std::make_unique<ArenaState>(elements, std::move(widths), elements);
    case OptimizerOffload::host:
      return std::make_unique<ArenaState>(elements, std::move(widths), chunk);
    case OptimizerOffload::disk:
      return std::make_unique<FileState>(elements, std::move(widths), chunk, dir);
  }
  return nullptr;
}

}  // namespace strata
