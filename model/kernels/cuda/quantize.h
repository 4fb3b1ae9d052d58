// Block quantisation on the device (ZeRO++ qwZ int8 weights, qgZ int4 gradients): the CUDA
// kernels of model/kernels/cpu/quantize.h, with the same arguments and the same bytes. Both call
// the per-value arithmetic of model/kernels/quantize_block.h (the scale, round-half-even, the
// nibble packing, the fmaf of the dequantise-add), which also gives the packed shard layout and
// the error bound; tests/cuda/quantize_test.cu compares the two bit for bit.
//
// One CUDA block of threads per quantisation block: quantise reduces the block's absmax over its
// threads (a max, so the order does not change the result), then each thread writes payload bytes
// at a stride of the block's width; dequantise and dequantise-add give each thread elements at the
// same stride. `packed` must be 4-byte aligned (scales are stored as floats; every packed shard's
// size is a multiple of 4, so shards after the first stay aligned).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "model/kernels/quantize_block.h"

namespace strata::cuda {

// packed (shards, layout.bytes) = the quantised x (shards, layout.elements); padding bytes 0.
void quantize_shards(const float* x, const QuantizedShardLayout& layout, std::size_t shards,
                     std::uint8_t* packed, cudaStream_t stream);

// x (shards, layout.elements) = the dequantised packed (shards, layout.bytes).
void dequantize_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                       std::size_t shards, float* x, cudaStream_t stream);

// out (shards, layout.elements) += Σ_s dequantised packed[s], packed being (sources, shards,
// layout.bytes) as an all-to-all receives it, added in source order with one fmaf each: qgZ's
// sums after each hop in one pass over `out`.
void dequantize_add_shards(const std::uint8_t* packed, const QuantizedShardLayout& layout,
                           std::size_t shards, std::size_t sources, float* out,
                           cudaStream_t stream);

}  // namespace strata::cuda
