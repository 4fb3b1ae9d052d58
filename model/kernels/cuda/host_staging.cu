#include "model/kernels/cuda/host_staging.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "model/core/error.h"
#include "model/kernels/cuda/cast.h"
#include "model/kernels/cuda/check.h"

namespace strata::cuda {

HostStaging::HostStaging(std::size_t max_elements)
    : max_elements_(max_elements),
      converted_(std::max<std::size_t>(max_elements, 1) * sizeof(float)),
      converted_data_(converted_.allocate<float>(std::max<std::size_t>(max_elements, 1))) {}

void HostStaging::bind(cudaStream_t stream) {
  if (!bound_) {
    bound_ = true;
    stream_ = stream;
  }
  STRATA_CHECK(stream == stream_,
               "host staging used on a second stream: its conversion buffer "
               "is ordered by one stream only");
}

template <class T>
void HostStaging::to_host(float* host, const T* device, std::size_t count, cudaStream_t stream) {
  STRATA_CHECK(count <= max_elements_, "staging ", count, " elements, room for ", max_elements_);
  bind(stream);
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

template <class T>
void HostStaging::to_device(T* device, const float* host, std::size_t count, cudaStream_t stream) {
  STRATA_CHECK(count <= max_elements_, "staging ", count, " elements, room for ", max_elements_);
  bind(stream);
  if constexpr (std::is_same_v<T, float>) {
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(device, host, count * sizeof(float), cudaMemcpyHostToDevice, stream));
  } else {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(converted_data_, host, count * sizeof(float),
                                      cudaMemcpyHostToDevice, stream));
    cast(device, converted_data_, static_cast<long>(count), stream);
  }
}

#define STRATA_INSTANTIATE_HOST_STAGING(T)                                            \
  template void HostStaging::to_host<T>(float*, const T*, std::size_t, cudaStream_t); \
  template void HostStaging::to_device<T>(T*, const float*, std::size_t, cudaStream_t);
STRATA_INSTANTIATE_HOST_STAGING(float)
STRATA_INSTANTIATE_HOST_STAGING(__nv_bfloat16)
STRATA_INSTANTIATE_HOST_STAGING(__half)
#undef STRATA_INSTANTIATE_HOST_STAGING

}  // namespace strata::cuda
