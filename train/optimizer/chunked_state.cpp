#include "train/optimizer/chunked_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>

#include "model/core/error.h"

namespace strata {
namespace {

// none and host: the state in one arena, m then v.
class ArenaState final : public ChunkedState {
 public:
  ArenaState(std::size_t elements, std::size_t chunk)
      : ChunkedState(elements), chunk_(chunk), m_(elements, 0.0f), v_(elements, 0.0f) {}

  void visit(const Body& body) override {
    for (std::size_t first = 0; first < elements_; first += chunk_)
      body(first, std::min(chunk_, elements_ - first), m_.data() + first, v_.data() + first);
  }
  void read_all(float* m, float* v) override {
    std::copy(m_.begin(), m_.end(), m);
    std::copy(v_.begin(), v_.end(), v);
  }
  void write_all(const float* m, const float* v) override {
    std::copy_n(m, elements_, m_.begin());
    std::copy_n(v, elements_, v_.begin());
  }
  std::size_t resident_bytes() const override { return 2 * elements_ * sizeof(float); }

 private:
  std::size_t chunk_;
  std::vector<float> m_, v_;
};

// disk: chunk k of the file at k · chunk · 8 bytes, its m then its v.
class FileState final : public ChunkedState {
 public:
  FileState(std::size_t elements, std::size_t chunk, const std::string& dir)
      : ChunkedState(elements), chunk_(chunk) {
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
    const auto bytes = static_cast<off_t>(2 * elements * sizeof(float));
    if (::ftruncate(fd_, bytes) != 0)  // reads as zeros: the state's start
      fail("optimizer.offload_dir: cannot size the optimizer's state file in '", dir, "' to ",
           bytes, " bytes: ", std::strerror(errno));
    for (std::vector<float>& b : buffers_) b.resize(2 * std::min(chunk_, elements));
  }
  ~FileState() override { ::close(fd_); }

  void visit(const Body& body) override {
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
      const std::size_t first = k * chunk_, count = std::min(chunk_, elements_ - first);
      float* data = buffers_[k % 3].data();
      body(first, count, data, data + count);
      writing[k % 3] = std::async(std::launch::async, [this, k] { transfer(k, k % 3, true); });
    }
    for (std::future<void>& w : writing)
      if (w.valid()) w.get();
  }
  void read_all(float* m, float* v) override {
    visit([&](std::size_t first, std::size_t count, float* cm, float* cv) {
      std::copy_n(cm, count, m + first);
      std::copy_n(cv, count, v + first);
    });
  }
  void write_all(const float* m, const float* v) override {
    visit([&](std::size_t first, std::size_t count, float* cm, float* cv) {
      std::copy_n(m + first, count, cm);
      std::copy_n(v + first, count, cv);
    });
  }
  std::size_t resident_bytes() const override {
    return buffers_.size() * buffers_[0].size() * sizeof(float);
  }

 private:
  // Reads chunk k into buffer b, or writes it from there.
  void transfer(std::size_t k, std::size_t b, bool write) {
    const std::size_t count = std::min(chunk_, elements_ - k * chunk_);
    auto* data = reinterpret_cast<char*>(buffers_[b].data());
    std::size_t left = 2 * count * sizeof(float);
    auto at = static_cast<off_t>(2 * k * chunk_ * sizeof(float));
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

  std::size_t chunk_;
  int fd_ = -1;
  std::array<std::vector<float>, 3> buffers_;
};

}  // namespace

std::unique_ptr<ChunkedState> ChunkedState::make(OptimizerOffload where, std::size_t elements,
                                                 std::size_t chunk, const std::string& dir) {
  switch (where) {
    case OptimizerOffload::none:
      return std::make_unique<ArenaState>(elements, std::max<std::size_t>(elements, 1));
    case OptimizerOffload::host:
      return std::make_unique<ArenaState>(elements, chunk);
    case OptimizerOffload::disk:
      return std::make_unique<FileState>(elements, chunk, dir);
  }
  return nullptr;
}

}  // namespace strata
