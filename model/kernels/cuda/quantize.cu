#include "model/kernels/cuda/quantize.h"

#include <climits>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/reduce.cuh"

namespace strata::cuda {

namespace {

// 2048-value blocks (ZeRO++'s size) give each thread 8 values.
constexpr int kQuantThreads = 256;

struct AbsmaxOp {
  __device__ float operator()(float a, float b) const { return absmax_combine(a, b); }
};

// Block b of shard k, for the CUDA block blockIdx.x = k · layout.blocks + b.
struct BlockCoordinates {
  std::size_t shard, block;
};
__device__ BlockCoordinates this_block(const QuantizedShardLayout& layout) {
  return {blockIdx.x / layout.blocks, blockIdx.x % layout.blocks};
}

__global__ void __launch_bounds__(kQuantThreads)
    quantize_kernel(const float* x, QuantizedShardLayout layout, std::uint8_t* packed) {
  __shared__ float partials[32];
  const auto [k, b] = this_block(layout);
  const float* block_x = x + k * layout.elements + layout.block_begin(b);
  const std::size_t len = layout.block_length(b);
  float absmax = 0.0f;
  for (std::size_t i = threadIdx.x; i < len; i += blockDim.x)
    absmax = absmax_accumulate(absmax, block_x[i]);
  absmax = block_reduce(absmax, partials, 0.0f, AbsmaxOp{});
  const float scale = quant_scale(absmax, layout.format);

  std::uint8_t* shard = packed + k * layout.bytes;
  if (threadIdx.x == 0) *reinterpret_cast<float*>(shard + layout.scale_offset(b)) = scale;
  std::uint8_t* payload = shard + layout.block_payload_offset(b);
  const std::size_t bytes = quant_block_bytes(len, layout.format);
  for (std::size_t j = threadIdx.x; j < bytes; j += blockDim.x)
    payload[j] = quantized_byte(block_x, len, j, scale, layout.format);
  if (b + 1 == layout.blocks)  // the shard's last block also zeroes the padding after it
    for (std::size_t p = layout.payload_offset + layout.payload_bytes + threadIdx.x;
         p < layout.bytes; p += blockDim.x)
      shard[p] = 0;
}

// out = (or +=, kAdd) the dequantised packed (sources, shards, layout.bytes), sources in order.
template <bool kAdd>
__global__ void __launch_bounds__(kQuantThreads)
    dequantize_kernel(const std::uint8_t* packed, QuantizedShardLayout layout, std::size_t shards,
                      std::size_t sources, float* out) {
  const auto [k, b] = this_block(layout);
  float* block_out = out + k * layout.elements + layout.block_begin(b);
  const std::size_t len = layout.block_length(b);
  for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
    float value = kAdd ? block_out[i] : 0.0f;
    for (std::size_t s = 0; s < sources; ++s) {
      const std::uint8_t* shard = packed + (s * shards + k) * layout.bytes;
      const float scale = *reinterpret_cast<const float*>(shard + layout.scale_offset(b));
      const int q = quantized_element(shard + layout.block_payload_offset(b), i, layout.format);
      value = kAdd ? dequantize_add_value(value, q, scale) : dequantize_value(q, scale);
    }
    block_out[i] = value;
  }
}

// CUDA blocks for `shards` shards of `layout` (0 when there is nothing to do).
unsigned grid_for(const QuantizedShardLayout& layout, std::size_t shards,
                  const std::uint8_t* packed) {
  const std::size_t blocks = shards * layout.blocks;
  STRATA_CHECK(blocks <= static_cast<std::size_t>(INT_MAX), blocks, " quantisation blocks");
  STRATA_CHECK(blocks == 0 || is_aligned(packed, alignof(float)),
               "packed shards must be 4-byte aligned");
  return static_cast<unsigned>(blocks);
}

template <bool kAdd>
void launch_dequantize(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                       std::size_t shards, std::size_t sources, float* out, cudaStream_t stream) {
  const unsigned grid = grid_for(layout, shards, packed);
  if (grid == 0 || sources == 0) return;
  dequantize_kernel<kAdd><<<grid, kQuantThreads, 0, stream>>>(packed, layout, shards, sources, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize_shards(const float* x, const QuantizedShardLayout& layout, std::size_t shards,
                     std::uint8_t* packed, cudaStream_t stream) {
  const unsigned grid = grid_for(layout, shards, packed);
  if (grid == 0) return;
  quantize_kernel<<<grid, kQuantThreads, 0, stream>>>(x, layout, packed);
  STRATA_CUDA_CHECK_LAUNCH();
}

void dequantize_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                       std::size_t shards, float* x, cudaStream_t stream) {
  launch_dequantize<false>(packed, layout, shards, 1, x, stream);
}

void dequantize_add_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                           std::size_t shards, std::size_t sources, float* out,
                           cudaStream_t stream) {
  launch_dequantize<true>(packed, layout, shards, sources, out, stream);
}

}  // namespace strata::cuda
