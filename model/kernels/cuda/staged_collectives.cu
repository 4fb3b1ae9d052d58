// Status: compiled for sm_90a, never run on a GPU (untested).
#include "model/kernels/cuda/staged_collectives.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/cast.h"
#include "model/kernels/cuda/check.h"

namespace strata::cuda {

StagedCollectives::StagedCollectives(Collectives& group, std::size_t max_elements)
    : group_(group),
      max_elements_(max_elements),
      converted_(group.size() > 1 ? std::max<std::size_t>(max_elements, 1) * sizeof(float) : 1) {
  if (group.size() == 1) return;  // copies only: no staging
  converted_data_ = converted_.allocate<float>(max_elements);
  STRATA_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&host_), 2 * max_elements * sizeof(float)));
}

StagedCollectives::~StagedCollectives() {
  if (host_ != nullptr) STRATA_CUDA_REPORT(cudaFreeHost(host_));
}

template <class T>
void StagedCollectives::to_host(float* host, const T* device, std::size_t count,
                                cudaStream_t stream) {
  const float* source = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    source = device;
  } else {
    cast(converted_data_, device, static_cast<long>(count), stream);
    source = converted_data_;
  }
  STRATA_CUDA_CHECK(
      cudaMemcpyAsync(host, source, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// The copy reads `host` asynchronously: the next to_host on the same stream is ordered after it,
// and nothing touches the staging memory from the host before that to_host has waited.
template <class T>
void StagedCollectives::to_device(T* device, const float* host, std::size_t count,
                                  cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(device, host, count * sizeof(float), cudaMemcpyHostToDevice, stream));
  } else {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(converted_data_, host, count * sizeof(float),
                                      cudaMemcpyHostToDevice, stream));
    cast(device, converted_data_, static_cast<long>(count), stream);
  }
}

template <class T>
void StagedCollectives::all_reduce_sum(T* data, std::size_t count, cudaStream_t stream) {
  if (size() == 1 || count == 0) return;
  STRATA_CHECK(count <= max_elements_, "staged all_reduce of ", count, " elements, room for ",
               max_elements_);
  to_host(host_, data, count, stream);
  group_.all_reduce_sum(host_, count);
  to_device(data, host_, count, stream);
}

template <class T>
void StagedCollectives::all_gather(const T* in, T* out, std::size_t count, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (n == 1) {
    if (in != out && count > 0)
      STRATA_CUDA_CHECK(
          cudaMemcpyAsync(out, in, count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  STRATA_CHECK(n * count <= max_elements_, "staged all_gather of ", n * count,
               " elements, room for ", max_elements_);
  float* mine = host_ + static_cast<std::size_t>(rank()) * count;  // in place on the host
  to_host(mine, in, count, stream);
  group_.all_gather(mine, host_, count);
  to_device(out, host_, n * count, stream);
}

template <class T>
void StagedCollectives::reduce_scatter_sum(const T* in, T* out, std::size_t count,
                                           cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (n == 1) {
    if (in != out && count > 0)
      STRATA_CUDA_CHECK(
          cudaMemcpyAsync(out, in, count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  STRATA_CHECK(n * count <= max_elements_, "staged reduce_scatter of ", n * count,
               " elements, room for ", max_elements_);
  to_host(host_, in, n * count, stream);
  float* reduced = host_ + max_elements_;  // must not overlap the input
  group_.reduce_scatter_sum(host_, reduced, count);
  to_device(out, reduced, count, stream);
}

void StagedCollectives::all_reduce_max(float* data, std::size_t count, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (n == 1 || count == 0) return;
  STRATA_CHECK(n * count <= max_elements_, "staged all_reduce_max of ", n * count,
               " elements, room for ", max_elements_);
  // The group has sums and gathers only: gather every rank's values, then take the maxima here.
  float* mine = host_ + static_cast<std::size_t>(rank()) * count;
  to_host(mine, data, count, stream);
  group_.all_gather(mine, host_, count);
  float* result = host_ + max_elements_;
  for (std::size_t i = 0; i < count; ++i) {
    float m = host_[i];
    for (std::size_t r = 1; r < n; ++r) m = std::max(m, host_[r * count + i]);
    result[i] = m;
  }
  to_device(data, result, count, stream);
}

#define STRATA_INSTANTIATE_STAGED(T)                                                       \
  template void StagedCollectives::all_reduce_sum<T>(T*, std::size_t, cudaStream_t);       \
  template void StagedCollectives::all_gather<T>(const T*, T*, std::size_t, cudaStream_t); \
  template void StagedCollectives::reduce_scatter_sum<T>(const T*, T*, std::size_t, cudaStream_t);
STRATA_INSTANTIATE_STAGED(float)
STRATA_INSTANTIATE_STAGED(__nv_bfloat16)
STRATA_INSTANTIATE_STAGED(__half)
#undef STRATA_INSTANTIATE_STAGED

}  // namespace strata::cuda
