#include "model/kernels/cuda/staged_collectives.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "model/core/error.h"
#include "model/kernels/cuda/check.h"

namespace strata::cuda {

StagedCollectives::StagedCollectives(Collectives& group, std::size_t max_elements)
    : group_(group), staging_(group.size() > 1 ? max_elements : 0) {
  if (group.size() == 1) return;  // copies only: no staging
  host_ = PinnedBuffer<float>(2 * max_elements);
}

template <class T>
void StagedCollectives::copy_alone(const T* in, T* out, std::size_t count, cudaStream_t stream) {
  if (in != out && count > 0)
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(out, in, count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
}

void StagedCollectives::check_room(const char* collective, std::size_t elements) const {
  STRATA_CHECK(elements <= staging_.max_elements(), "staged ", collective, " of ", elements,
               " elements, room for ", staging_.max_elements());
}

// Every host access to host_ below follows a to_host, which has waited for the stream: the
// asynchronous copies out of host_ queued by an earlier call are done by then.
template <class T>
void StagedCollectives::staged_all_reduce_sum(T* data, std::size_t count, cudaStream_t stream) {
  if (size() == 1 || count == 0) return;
  check_room("all_reduce", count);
  staging_.to_host(host_.data(), data, count, stream);
  group_.all_reduce_sum(host_.data(), count);
  staging_.to_device(data, host_.data(), count, stream);
}

template <class T>
void StagedCollectives::staged_all_gather(const T* in, T* out, std::size_t count,
                                          cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (n == 1) return copy_alone(in, out, count, stream);
  check_room("all_gather", n * count);
  float* mine = host_.data() + static_cast<std::size_t>(rank()) * count;  // in place on the host
  staging_.to_host(mine, in, count, stream);
  group_.all_gather(mine, host_.data(), count);
  staging_.to_device(out, host_.data(), n * count, stream);
}

template <class T>
void StagedCollectives::staged_reduce_scatter_sum(const T* in, T* out, std::size_t count,
                                                  cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (n == 1) return copy_alone(in, out, count, stream);
  check_room("reduce_scatter", n * count);
  staging_.to_host(host_.data(), in, n * count, stream);
  float* reduced = host_.data() + staging_.max_elements();  // must not overlap the input
  group_.reduce_scatter_sum(host_.data(), reduced, count);
  staging_.to_device(out, reduced, count, stream);
}

namespace {

// A staged ring shift in flight: the host transfer, then the received block copied to the device.
template <class T>
class StagedArrival final : public PendingCollective {
 public:
  StagedArrival(std::unique_ptr<PendingCollective> transfer, HostStaging& staging, T* recv,
                const float* host, std::size_t count, cudaStream_t stream)
      : transfer_(std::move(transfer)),
        staging_(staging),
        recv_(recv),
        host_(host),
        count_(count),
        stream_(stream) {}
  ~StagedArrival() override {
    if (transfer_) transfer_->wait();  // the buffers must outlive the transfer; no copy queued
  }
  void wait() override {
    if (!transfer_) return;
    transfer_->wait();
    transfer_.reset();
    staging_.to_device(recv_, host_, count_, stream_);
  }

 private:
  std::unique_ptr<PendingCollective> transfer_;
  HostStaging& staging_;
  T* recv_;
  const float* host_;
  std::size_t count_;
  cudaStream_t stream_;
};

}  // namespace

// The block goes out from the first half of host_, comes in to the second.
template <class T>
std::unique_ptr<PendingCollective> StagedCollectives::staged_ring_shift(const T* send, T* recv,
                                                                        std::size_t count,
                                                                        cudaStream_t stream) {
  if (size() == 1) {
    copy_alone(send, recv, count, stream);
    return std::make_unique<CompletedCollective>();
  }
  check_room("ring shift", count);
  float* out = host_.data();
  float* in = host_.data() + staging_.max_elements();
  staging_.to_host(out, send, count, stream);
  return std::make_unique<StagedArrival<T>>(group_.start_ring_shift(out, in, count), staging_, recv,
                                            in, count, stream);
}

void StagedCollectives::all_reduce_max(float* data, std::size_t count, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (n == 1 || count == 0) return;
  check_room("all_reduce_max", n * count);
  // The group has sums and gathers only: gather every rank's values, then take the maxima here.
  float* mine = host_.data() + static_cast<std::size_t>(rank()) * count;
  staging_.to_host(mine, data, count, stream);
  group_.all_gather(mine, host_.data(), count);
  float* result = host_.data() + staging_.max_elements();
  for (std::size_t i = 0; i < count; ++i) {
    float m = host_[i];
    for (std::size_t r = 1; r < n; ++r) m = std::max(m, host_[r * count + i]);
    result[i] = m;
  }
  staging_.to_device(data, result, count, stream);
}

// The element type as a value, back to the typed staging above.
template <class F>
static void with_element(Element element, F&& call) {
  switch (element) {
    case Element::f32:
      return call(float{});
    case Element::bf16:
      return call(__nv_bfloat16{});
    case Element::f16:
      return call(__half{});
  }
}

void StagedCollectives::all_reduce_sum_of(Element element, void* data, std::size_t count,
                                          cudaStream_t stream) {
  with_element(element, [&](auto zero) {
    using T = decltype(zero);
    staged_all_reduce_sum(static_cast<T*>(data), count, stream);
  });
}

void StagedCollectives::all_gather_of(Element element, const void* in, void* out, std::size_t count,
                                      cudaStream_t stream) {
  with_element(element, [&](auto zero) {
    using T = decltype(zero);
    staged_all_gather(static_cast<const T*>(in), static_cast<T*>(out), count, stream);
  });
}

std::unique_ptr<PendingCollective> StagedCollectives::start_ring_shift_of(
    Element element, const void* send, void* recv, std::size_t count, cudaStream_t stream) {
  std::unique_ptr<PendingCollective> pending;
  with_element(element, [&](auto zero) {
    using T = decltype(zero);
    pending = staged_ring_shift(static_cast<const T*>(send), static_cast<T*>(recv), count, stream);
  });
  return pending;
}

void StagedCollectives::reduce_scatter_sum_of(Element element, const void* in, void* out,
                                              std::size_t count, cudaStream_t stream) {
  with_element(element, [&](auto zero) {
    using T = decltype(zero);
    staged_reduce_scatter_sum(static_cast<const T*>(in), static_cast<T*>(out), count, stream);
  });
}

}  // namespace strata::cuda
