#include "model/kernels/cuda/arena.h"

#include <utility>

#include "model/kernels/cuda/check.h"

namespace strata::cuda {

DeviceArena::DeviceArena(std::size_t capacity) : base_(capacity) {}

// A moved-from arena is empty: nothing reserved, nothing in use.
DeviceArena::DeviceArena(DeviceArena&& other) noexcept
    : base_(std::move(other.base_)),
      used_(std::exchange(other.used_, 0)),
      peak_(std::exchange(other.peak_, 0)) {}

DeviceArena& DeviceArena::operator=(DeviceArena&& other) noexcept {
  if (this != &other) {
    base_ = std::move(other.base_);
    used_ = std::exchange(other.used_, 0);
    peak_ = std::exchange(other.peak_, 0);
  }
  return *this;
}

void* DeviceArena::allocate(std::size_t bytes, std::size_t alignment) {
  STRATA_CHECK(
      alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment <= kDefaultAlignment,
      "arena alignment ", alignment, " is not a power of two up to 256");
  const std::size_t begin = (used_ + alignment - 1) & ~(alignment - 1);
  if (begin > capacity() || bytes > capacity() - begin)
    fail("device arena full: ", bytes, " bytes requested with ", used_, " of ", capacity(),
         " in use");
  used_ = begin + bytes;
  if (used_ > peak_) peak_ = used_;
  return base_.get() + begin;
}

void DeviceArena::reset(std::size_t mark) {
  STRATA_CHECK(mark <= used_, "arena reset to ", mark, " beyond its use ", used_);
  used_ = mark;
}

}  // namespace strata::cuda
