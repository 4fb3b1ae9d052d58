#include "parallel/diloco/outer_compression.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "model/core/error.h"
#include "model/kernels/cpu/precision.h"
#include "model/kernels/cpu/quantize.h"
#include "parallel/zero/segment_collectives.h"

namespace strata {

OuterCompression outer_compression_from_name(const std::string& name) {
  if (const auto format = kOuterCompressionChoices.find(name)) return *format;
  fail("unknown diloco.compression '", name, "' (expected ", kOuterCompressionChoices.list(), ")");
}

namespace {

QuantizedShardLayout layout_of(std::size_t count, OuterCompression format) {
  return format == OuterCompression::int8
             ? quantized_shard_layout(count, kWeightQuantBlock, QuantFormat::int8)
             : quantized_shard_layout(count, kGradientQuantBlock, QuantFormat::int4);
}

// binary16 bits of a float that is exactly representable in fp16 (cpu::round_to_fp16's output).
std::uint16_t fp16_bits(float y) {
  const std::uint16_t sign = std::signbit(y) ? 0x8000 : 0;
  if (std::isnan(y)) return sign | 0x7E00;
  const float a = std::fabs(y);
  if (std::isinf(a)) return sign | 0x7C00;
  if (a < 0x1p-14f)  // subnormal (or zero): a multiple of 2^-24
    return sign | static_cast<std::uint16_t>(a * 0x1p24f);
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m·2^e, m in [0.5, 1)
  const auto exponent = static_cast<std::uint16_t>(e - 1 + 15);
  const auto mantissa = static_cast<std::uint16_t>((m * 2.0f - 1.0f) * 1024.0f);
  return sign | static_cast<std::uint16_t>(exponent << 10) | mantissa;
}

float from_fp16_bits(std::uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  if (exponent == 0x1F) return mantissa ? std::nanf("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 1024.0f, exponent - 15);
}

}  // namespace

std::size_t compressed_bytes(std::size_t count, OuterCompression format) {
  switch (format) {
    case OuterCompression::none:
      return 4 * count;
    case OuterCompression::fp16:
    case OuterCompression::bf16:
      return 2 * count;
    case OuterCompression::int8:
    case OuterCompression::int4:
      return layout_of(count, format).bytes;
  }
  return 0;
}

void compress(const float* x, std::size_t count, OuterCompression format, std::uint8_t* out) {
  switch (format) {
    case OuterCompression::none:
      std::memcpy(out, x, 4 * count);
      return;
    case OuterCompression::bf16:
      for (std::size_t i = 0; i < count; ++i) {
        const auto bits = static_cast<std::uint16_t>(
            std::bit_cast<std::uint32_t>(cpu::round_to_bf16(x[i])) >> 16);
        std::memcpy(out + 2 * i, &bits, 2);
      }
      return;
    case OuterCompression::fp16:
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t bits = fp16_bits(cpu::round_to_fp16(x[i]));
        std::memcpy(out + 2 * i, &bits, 2);
      }
      return;
    case OuterCompression::int8:
    case OuterCompression::int4:
      if (count > 0) cpu::quantize_shards(x, layout_of(count, format), 1, out);
      return;
  }
}

void decompress_add(const std::uint8_t* in, std::size_t count, OuterCompression format,
                    float* out) {
  switch (format) {
    case OuterCompression::none:
      for (std::size_t i = 0; i < count; ++i) {
        float v = 0;
        std::memcpy(&v, in + 4 * i, 4);
        out[i] += v;
      }
      return;
    case OuterCompression::bf16:
    case OuterCompression::fp16:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t bits = 0;
        std::memcpy(&bits, in + 2 * i, 2);
        out[i] += format == OuterCompression::bf16
                      ? std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16)
                      : from_fp16_bits(bits);
      }
      return;
    case OuterCompression::int8:
    case OuterCompression::int4:
      if (count > 0) cpu::dequantize_add_shards(in, layout_of(count, format), 1, 1, out);
      return;
  }
}

void ErrorFeedback::compress(const float* x, OuterCompression format, std::uint8_t* out) {
  const std::size_t count = residual_.size();
  corrected_.resize(count);
  for (std::size_t i = 0; i < count; ++i) corrected_[i] = x[i] + residual_[i];
  strata::compress(corrected_.data(), count, format, out);
  // residual = corrected − round trip: decompress_add onto −corrected gives −residual.
  for (std::size_t i = 0; i < count; ++i) residual_[i] = -corrected_[i];
  decompress_add(out, count, format, residual_.data());
  for (float& r : residual_) r = -r;
}

}  // namespace strata
