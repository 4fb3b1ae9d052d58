// Symmetric block quantisation of flat fp32 arrays, as ZeRO++ communicates them (Wang et al.,
// arXiv 2306.10209): qwZ all-gathers weights in int8, qgZ reduce-scatters gradients in int4. This
// header holds the arithmetic, written once for the CPU kernels (model/kernels/cpu/quantize.h)
// and the CUDA kernels (model/kernels/cuda/quantize.h), and the byte layout both write.
//
// Blocks. A shard of `elements` values is cut into blocks of `block` consecutive values; the last
// one may be short. Blocks never straddle a shard: each shard is laid out on its own, so the
// shards of a collective (one per peer) are quantised and dequantised independently.
//
// Per block (qmax = 127 for int8, 7 for int4):
//   absmax = max |x|                 (NaN-propagating, see "non-finite inputs")
//   scale  = 0                       when absmax = 0 (all q are 0: exact zeros, no division)
//          = max(absmax / qmax, 2^-126) otherwise, one ulp lower if qmax·scale would overflow
//   q      = clamp(round_half_even(x / scale), −qmax, qmax)
//   x̂      = q · scale                dequantise;   acc = fma(q, scale, acc)   dequantise-add
// The 2^-126 floor (FLT_MIN) keeps the scale a normal float: a block whose absmax is a denormal
// (or below qmax·2^-126 ≈ 1.5e-36 for int8) would otherwise get a scale that is 0 or has lost its
// relative precision, and then values near absmax would clamp far from x. Such blocks are
// quantised on the 2^-126 grid instead, under the same bound. The one-ulp-lower rule only
// concerns absmax within an ulp of FLT_MAX (127·fl(FLT_MAX/127) rounds to inf).
//
// Error bound (finite inputs): for every element,
//   |x − x̂| ≤ scale/2 + qmax·2^-22·scale
// and x = 0 dequantises to exactly 0 (−0 becomes +0). The rounding step is scale/2; the second
// term is fp32's, and it can be reached (tests/unit/ops_quantize_test.cpp has values that exceed
// scale/2): x/scale is rounded before round_half_even, so a value just past a half step can land
// on it and round the far way (up to qmax·2^-24·scale more), and q·scale is rounded once more (up
// to qmax·2^-24·scale). Together about one ulp of absmax; the stated term is twice that, 2^-15 of
// a step for int8 and 2^-19 for int4. (Host code runs in the default round-to-nearest mode.)
//
// Non-finite inputs: a NaN or ±inf in a block makes its absmax, hence its scale, NaN or inf, and
// then every value of the block dequantises to a non-finite value, so an overflow check after the
// collective (fp16 loss scaling, the skip-step policy) still sees it. q itself stays in range (the
// clamp's fminf/fmaxf return the non-NaN operand), so no conversion is undefined.
//
// Bitwise agreement of the two backends: the division, rint, the product and fmaf are correctly
// rounded on both (nvcc divides IEEE-exactly unless built with fast math, which Strata is not),
// the dequantise-add is an explicit fmaf so no compiler may contract it differently, and the
// absmax is a max, exact in any order.
//
// Payload. int8: one signed byte per value. int4: two values per byte, the even element of the
// block in the low nibble and the odd one in the high nibble, 4-bit two's complement; a block of
// odd length pads its last high nibble with 0. Each block's payload starts on a byte, so the CUDA
// threads of one block never write a byte of another:
//   block_bytes(len) = len (int8) or ⌈len/2⌉ (int4)
//   payload_bytes    = ⌊elements/block⌋·block_bytes(block) + block_bytes(elements mod block)
//
// Packed shard (QuantizedShardLayout): one contiguous byte buffer, what all-gather and
// all-to-all carry as uint8 (model/core/collectives.h, parallel/comm/communicator.h):
//   offset 0               scales    blocks × fp32, block order
//   offset 4·blocks        payload   block b at 4·blocks + b·block_bytes(block)
//   offset 4·blocks + payload_bytes   zero bytes up to `bytes`, a multiple of 4
// Scales come first so that their alignment never depends on the payload's length: they sit at
// offset 0, and since every packed shard's size is a multiple of 4, the shards of a gathered
// buffer (shard r at r·bytes) keep their scales 4-byte aligned when the buffer is. A shard of 0
// elements has 0 blocks and 0 bytes.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/core/error.h"
#include "model/core/host_device.h"

namespace strata {

enum class QuantFormat { int8, int4 };

// The largest |q|: symmetric ranges, so −128 and −8 are never produced (dequantise reads them).
STRATA_HOST_DEVICE constexpr int quant_max(QuantFormat format) {
  return format == QuantFormat::int8 ? 127 : 7;
}

// The smallest nonzero scale: FLT_MIN, the smallest normal float.
inline constexpr float kMinQuantScale = FLT_MIN;

// max(a, b) that returns NaN when either is NaN (fmaxf would drop it).
STRATA_HOST_DEVICE inline float absmax_combine(float a, float b) {
  return (a != a || a > b) ? a : b;
}

// A running absmax (starting at 0) updated with one more value.
STRATA_HOST_DEVICE inline float absmax_accumulate(float running, float x) {
  return absmax_combine(running, fabsf(x));
}

STRATA_HOST_DEVICE inline float quant_scale(float absmax, QuantFormat format) {
  if (absmax == 0.0f) return 0.0f;
  const float qmax = static_cast<float>(quant_max(format));
  float scale = absmax / qmax;
  if (scale < kMinQuantScale) scale = kMinQuantScale;                               // NaN stays NaN
  if (scale <= FLT_MAX && scale * qmax > FLT_MAX) scale = nextafterf(scale, 0.0f);  // inf stays
  return scale;
}

// q of one value (scale from quant_scale for its block).
STRATA_HOST_DEVICE inline int quantize_value(float x, float scale, QuantFormat format) {
  if (scale == 0.0f) return 0;
  const float qmax = static_cast<float>(quant_max(format));
  return static_cast<int>(fminf(fmaxf(rintf(x / scale), -qmax), qmax));
}

STRATA_HOST_DEVICE inline float dequantize_value(int q, float scale) {
  return static_cast<float>(q) * scale;
}

// acc + q·scale with one rounding.
STRATA_HOST_DEVICE inline float dequantize_add_value(float acc, int q, float scale) {
  return fmaf(static_cast<float>(q), scale, acc);
}

// One byte of two int4 values (each in [−8, 7]) and back.
STRATA_HOST_DEVICE inline std::uint8_t pack_int4(int even, int odd) {
  return static_cast<std::uint8_t>((even & 0xF) | ((odd & 0xF) << 4));
}
STRATA_HOST_DEVICE inline int unpack_int4_low(std::uint8_t byte) { return ((byte & 0xF) ^ 8) - 8; }
STRATA_HOST_DEVICE inline int unpack_int4_high(std::uint8_t byte) { return ((byte >> 4) ^ 8) - 8; }

// Payload bytes of a block of `len` values.
STRATA_HOST_DEVICE constexpr std::size_t quant_block_bytes(std::size_t len, QuantFormat format) {
  return format == QuantFormat::int8 ? len : (len + 1) / 2;
}

// Byte j of the payload of a block of `len` values x (len ≥ 1, j < quant_block_bytes(len)).
STRATA_HOST_DEVICE inline std::uint8_t quantized_byte(const float* x, std::size_t len,
                                                      std::size_t j, float scale,
                                                      QuantFormat format) {
  if (format == QuantFormat::int8)
    return static_cast<std::uint8_t>(static_cast<std::int8_t>(quantize_value(x[j], scale, format)));
  const int even = quantize_value(x[2 * j], scale, format);
  const int odd = 2 * j + 1 < len ? quantize_value(x[2 * j + 1], scale, format) : 0;
  return pack_int4(even, odd);
}

// q of element i of a block, from the block's payload.
STRATA_HOST_DEVICE inline int quantized_element(const std::uint8_t* payload, std::size_t i,
                                                QuantFormat format) {
  if (format == QuantFormat::int8) return static_cast<std::int8_t>(payload[i]);
  const std::uint8_t byte = payload[i / 2];
  return i % 2 == 0 ? unpack_int4_low(byte) : unpack_int4_high(byte);
}

// The packed form of one shard (see the header comment). Plain data: kernels take it by value.
struct QuantizedShardLayout {
  QuantFormat format = QuantFormat::int8;
  std::size_t elements = 0;  // values in the shard
  std::size_t block = 1;     // values per block (the last block may hold fewer)
  std::size_t blocks = 0;    // ⌈elements / block⌉
  std::size_t payload_offset = 0;
  std::size_t payload_bytes = 0;
  std::size_t bytes = 0;  // the whole packed shard, a multiple of 4

  STRATA_HOST_DEVICE std::size_t block_begin(std::size_t b) const { return b * block; }
  STRATA_HOST_DEVICE std::size_t block_length(std::size_t b) const {
    const std::size_t rest = elements - b * block;
    return rest < block ? rest : block;
  }
  // Byte offset of block b's scale and of its payload in the packed shard.
  STRATA_HOST_DEVICE std::size_t scale_offset(std::size_t b) const { return b * sizeof(float); }
  STRATA_HOST_DEVICE std::size_t block_payload_offset(std::size_t b) const {
    return payload_offset + b * quant_block_bytes(block, format);
  }
};

// The layout of a shard of `elements` values in blocks of `block` (≥ 1).
inline QuantizedShardLayout quantized_shard_layout(std::size_t elements, std::size_t block,
                                                   QuantFormat format) {
  STRATA_CHECK(block >= 1, "quantisation block of ", block, " elements");
  QuantizedShardLayout layout;
  layout.format = format;
  layout.elements = elements;
  layout.block = block;
  layout.blocks = (elements + block - 1) / block;
  layout.payload_offset = layout.blocks * sizeof(float);
  layout.payload_bytes = (elements / block) * quant_block_bytes(block, format) +
                         quant_block_bytes(elements % block, format);
  layout.bytes = (layout.payload_offset + layout.payload_bytes + 3) / 4 * 4;
  return layout;
}

}  // namespace strata
