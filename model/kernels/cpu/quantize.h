// Block quantisation of fp32 shards into packed byte buffers and back (ZeRO++ qwZ int8 weights,
// qgZ int4 gradients): the CPU reference of model/kernels/cuda/quantize.h, running the same
// per-value arithmetic (model/kernels/quantize_block.h, which also states the error bound and the
// packed layout). OpenMP over blocks; results do not depend on the thread count.
//
// Every call handles `shards` consecutive shards of one layout at once, as a collective lays them
// out: x is (shards, layout.elements) fp32, packed is (shards, layout.bytes) bytes, shard k at
// k · layout.bytes. Padding bytes are written as zeros, so a packed buffer is fully defined.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/kernels/quantize_block.h"

namespace strata::cpu {

// packed (shards, layout.bytes) = the quantised x (shards, layout.elements).
void quantize_shards(const float* x, const QuantizedShardLayout& layout, std::size_t shards,
                     std::uint8_t* packed);

// x (shards, layout.elements) = the dequantised packed (shards, layout.bytes).
void dequantize_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                       std::size_t shards, float* x);

// out (shards, layout.elements) += Σ_s dequantised packed[s], packed being (sources, shards,
// layout.bytes) as an all-to-all receives it: each value added in source order with one fmaf
// (qgZ's sums after each hop; sources = 1 adds one buffer).
void dequantize_add_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                           std::size_t shards, std::size_t sources, float* out);

// The scale of block b of the packed shard at `packed_shard` (for checks and tests).
float packed_scale(const std::uint8_t* packed_shard, const QuantizedShardLayout& layout,
                   std::size_t b);

}  // namespace strata::cpu
