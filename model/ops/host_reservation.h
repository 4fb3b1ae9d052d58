// One block of zeroed host memory: what the CPU's ops (CpuOps::Reservation) give a model to lay
// its activations out in (model/gpt_storage.h), as device memory (DeviceBuffer) is CUDA's. It comes
// from calloc, so its pages stay untouched, and take no memory, until first written: a slot a
// pipeline schedule never uses costs nothing.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace strata {

class HostReservation {
 public:
  HostReservation() = default;
  explicit HostReservation(std::size_t bytes)
      : data_(static_cast<char*>(std::calloc(bytes == 0 ? 1 : bytes, 1))), size_(bytes) {
    if (data_ == nullptr) throw std::bad_alloc();
  }
  char* get() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  std::size_t size_ = 0;
};

}  // namespace strata
