// What the CUDA runtime says of this machine's devices (train/backend/cuda_training.h): how many,
// each one's identity and name, and which model shapes the kernels support.
#include <cuda_runtime_api.h>

#include <string>

#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/check.h"
#include "train/backend/cuda_training.h"

namespace strata {

int cuda_device_count() {
  int count = 0;
  // No driver or no device is not an error here: the answer is 0.
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

std::string cuda_device_identity(int device) {
  cudaDeviceProp properties{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (char byte : properties.uuid.bytes) {
    const auto b = static_cast<unsigned char>(byte);
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

bool cuda_supports_shape(const GptShape& shape) {
  return shape.n_head > 0 && shape.d_model % shape.n_head == 0 &&
         cuda::attention_head_size_supported(shape.head_size());
}

std::string cuda_device_name(int device) {
  cudaDeviceProp properties{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

}  // namespace strata
