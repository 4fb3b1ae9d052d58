// A bump allocator over one cudaMalloc reservation: activations and kernel scratch are carved out
// of it with alignment, and released by resetting to a mark. No cudaMalloc/cudaFree after start-up,
// and the peak shows exactly how much device memory a step needs (the attention test uses it to
// check that no T×T matrix is ever allocated).
//
// Stream order: reset() only moves a host-side offset. Memory released this way may be handed
// out again while kernels that used it are still queued; that is safe when every user of the arena
// runs on the same stream (later kernels run after earlier ones), which is the rule here. Work on
// another stream must synchronise with it first.
#pragma once

#include <cstddef>

#include "model/kernels/cuda/device_buffer.h"

namespace strata::cuda {

class DeviceArena {
 public:
  // Reserves `capacity` bytes of device memory on the current device.
  explicit DeviceArena(std::size_t capacity);
  DeviceArena(DeviceArena&& other) noexcept;
  DeviceArena& operator=(DeviceArena&& other) noexcept;

  // `bytes` at an address that is a multiple of `alignment` (a power of two, at most 256, the
  // alignment of the reservation). Error when the arena is full.
  void* allocate(std::size_t bytes, std::size_t alignment = kDefaultAlignment);
  template <class T>
  T* allocate(std::size_t count) {
    return static_cast<T*>(allocate(count * sizeof(T)));
  }

  // Bytes in use; pass it to reset() later to free everything allocated after it.
  std::size_t mark() const { return used_; }
  void reset(std::size_t mark = 0);

  std::size_t used() const { return used_; }
  std::size_t capacity() const { return base_.size(); }
  // Largest used() since construction or the last reset_peak().
  std::size_t peak() const { return peak_; }
  void reset_peak() { peak_ = used_; }

  // 256 bytes: cudaMalloc's own alignment, enough for vector loads, cuBLASLt's preferred operand
  // alignment and TMA.
  static constexpr std::size_t kDefaultAlignment = 256;

 private:
  DeviceBuffer<char> base_;
  std::size_t used_ = 0;
  std::size_t peak_ = 0;
};

// Releases everything allocated from `arena` during its lifetime (see the stream-order note above).
class ArenaScope {
 public:
  explicit ArenaScope(DeviceArena& arena) : arena_(arena), mark_(arena.mark()) {}
  ~ArenaScope() { arena_.reset(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  DeviceArena& arena_;
  std::size_t mark_;
};

}  // namespace strata::cuda
