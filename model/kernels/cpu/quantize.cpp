#include "model/kernels/cpu/quantize.h"

#include <cstring>

namespace strata::cpu {

namespace {

// body(shard, block) for every block of every shard; blocks are independent (each writes its own
// scale, payload bytes and output values), so any split over threads gives the same bytes.
template <class Body>
void for_each_block(const QuantizedShardLayout& layout, std::size_t shards, Body body) {
  const long blocks = static_cast<long>(layout.blocks);
  const long total = static_cast<long>(shards) * blocks;
#pragma omp parallel for schedule(static)
  for (long t = 0; t < total; ++t)
    body(static_cast<std::size_t>(t / blocks), static_cast<std::size_t>(t % blocks));
}

// out = (or +=, kAdd) the dequantised packed (sources, shards, layout.bytes).
template <bool kAdd>
void dequantize_into(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                     std::size_t shards, std::size_t sources, float* out) {
  for_each_block(layout, shards, [&](std::size_t k, std::size_t b) {
    float* block_out = out + k * layout.elements + layout.block_begin(b);
    const std::size_t len = layout.block_length(b);
    for (std::size_t s = 0; s < sources; ++s) {
      const std::uint8_t* shard = packed + (s * shards + k) * layout.bytes;
      const float scale = packed_scale(shard, layout, b);
      const std::uint8_t* payload = shard + layout.block_payload_offset(b);
      for (std::size_t i = 0; i < len; ++i) {
        const int q = quantized_element(payload, i, layout.format);
        block_out[i] =
            kAdd ? dequantize_add_value(block_out[i], q, scale) : dequantize_value(q, scale);
      }
    }
  });
}

}  // namespace

void quantize_shards(const float* x, const QuantizedShardLayout& layout, std::size_t shards,
                     std::uint8_t* packed) {
  for_each_block(layout, shards, [&](std::size_t k, std::size_t b) {
    const float* block_x = x + k * layout.elements + layout.block_begin(b);
    const std::size_t len = layout.block_length(b);
    float absmax = 0.0f;
    for (std::size_t i = 0; i < len; ++i) absmax = absmax_accumulate(absmax, block_x[i]);
    const float scale = quant_scale(absmax, layout.format);
    std::uint8_t* shard = packed + k * layout.bytes;
    std::memcpy(shard + layout.scale_offset(b), &scale, sizeof scale);
    std::uint8_t* payload = shard + layout.block_payload_offset(b);
    const std::size_t bytes = quant_block_bytes(len, layout.format);
    for (std::size_t j = 0; j < bytes; ++j)
      payload[j] = quantized_byte(block_x, len, j, scale, layout.format);
  });
  const std::size_t used = layout.payload_offset + layout.payload_bytes;
  if (layout.bytes > used)
    for (std::size_t k = 0; k < shards; ++k)
      std::memset(packed + k * layout.bytes + used, 0, layout.bytes - used);
}

void dequantize_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                       std::size_t shards, float* x) {
  dequantize_into<false>(packed, layout, shards, 1, x);
}

void dequantize_add_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                           std::size_t shards, std::size_t sources, float* out) {
  dequantize_into<true>(packed, layout, shards, sources, out);
}

float packed_scale(const std::uint8_t* packed_shard, const QuantizedShardLayout& layout,
                   std::size_t b) {
  float scale;  // memcpy: the bytes were not written as a float object here
  std::memcpy(&scale, packed_shard + layout.scale_offset(b), sizeof scale);
  return scale;
}

}  // namespace strata::cpu
