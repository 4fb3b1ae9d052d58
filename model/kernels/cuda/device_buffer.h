// Owned arrays of CUDA memory, freed when they go out of scope: DeviceBuffer<T> (device memory,
// cudaMalloc) and PinnedBuffer<T> (page-locked host memory, cudaMallocHost). They are the one RAII
// wrapper of those allocations: code that needs CUDA memory holds one of these, or carves it from
// a DeviceArena (arena.h), whose reservation is one.
//
// Both are move-only; an empty buffer (default-constructed, moved from, or of 0 elements) holds no
// memory. Contents start uninitialised. Device memory belongs to the device current at
// construction.
//
// The accessors differ on purpose: a DeviceBuffer's get() is a device pointer, which host code
// must not dereference, so it has no data(), operator[] or iterators; a PinnedBuffer is ordinary
// host memory and reads like a container.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"

namespace strata::cuda {

namespace buffer_detail {

enum class Memory { device, pinned_host };

// The allocation both buffers share: `count` elements of T, released once.
template <class T, Memory kind>
class Allocation {
 public:
  Allocation() = default;
  explicit Allocation(std::size_t count) : count_(count) {
    if (count_ == 0) return;
    void* memory = nullptr;
    if constexpr (kind == Memory::device)
      STRATA_CUDA_CHECK(cudaMalloc(&memory, bytes()));
    else
      STRATA_CUDA_CHECK(cudaMallocHost(&memory, bytes()));
    data_ = static_cast<T*>(memory);
  }
  ~Allocation() { release(); }
  Allocation(Allocation&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  Allocation& operator=(Allocation&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }

 protected:
  T* data_ = nullptr;

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    if constexpr (kind == Memory::device)
      STRATA_CUDA_REPORT(cudaFree(data_));
    else
      STRATA_CUDA_REPORT(cudaFreeHost(data_));
    data_ = nullptr;
    count_ = 0;
  }

  std::size_t count_ = 0;
};

}  // namespace buffer_detail

// `count` elements of T in device memory.
template <class T>
class DeviceBuffer : public buffer_detail::Allocation<T, buffer_detail::Memory::device> {
  using Base = buffer_detail::Allocation<T, buffer_detail::Memory::device>;

 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : Base(count) {}
  // A device copy of `host` (upload()).
  explicit DeviceBuffer(const std::vector<T>& host) : Base(host.size()) { upload(host); }

  T* get() const { return this->data_; }

  // Synchronous copies, for set-up and checks (never inside a step): each waits for the whole
  // device before copying, so kernels still queued on any stream (non-blocking ones included)
  // have finished, and an upload waits again after, because a copy from pageable memory may
  // return before its DMA lands and kernels on non-blocking streams would not wait for it.
  void upload(const std::vector<T>& host) {
    STRATA_CHECK(host.size() == this->size(), "upload of ", host.size(), " elements into ",
                 this->size());
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    if (!this->empty())
      STRATA_CUDA_CHECK(cudaMemcpy(get(), host.data(), this->bytes(), cudaMemcpyHostToDevice));
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> host(this->size());
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    if (!this->empty())
      STRATA_CUDA_CHECK(cudaMemcpy(host.data(), get(), this->bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
};

// `count` elements of T in page-locked host memory: copies between it and the device are truly
// asynchronous (cudaMemcpyAsync from pageable memory waits for the host buffer to be staged), so
// a step can queue them without waiting for the device in between.
template <class T>
class PinnedBuffer : public buffer_detail::Allocation<T, buffer_detail::Memory::pinned_host> {
  using Base = buffer_detail::Allocation<T, buffer_detail::Memory::pinned_host>;

 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : Base(count) {}

  T* data() const { return this->data_; }
  T& operator[](std::size_t i) const { return this->data_[i]; }
  T* begin() const { return this->data_; }
  T* end() const { return this->data_ + this->size(); }
};

}  // namespace strata::cuda
