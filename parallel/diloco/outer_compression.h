// Compression of DiLoCo's outer gradients (diloco.compression) for the transfers across the
// worker boundary, and error feedback (diloco.error_feedback): what compression lost of one outer
// gradient is added to the next, so the sum of what was sent tracks the sum of the true outer
// gradients (the residual stays bounded by one rounding step instead of the error accumulating).
// Sums of decompressed values are always fp32.
//
// Formats and their bound per value (x̂ = the value after a round trip):
//   none  4 bytes, exact.
//   bf16  2 bytes, round to nearest even: |x − x̂| ≤ 2^-8·|x| (normal range; 8 significant bits).
//   fp16  2 bytes, round to nearest even: |x − x̂| ≤ 2^-11·|x| in fp16's normal range, ≤ 2^-25
//         below it; beyond 65504 it overflows to ±inf (outer gradients are differences of
//         weights, far below that).
//   int8, int4  symmetric blocks (model/kernels/quantize_block.h, ZeRO++'s quantiser: int8 in
//         blocks of 2048, int4 in blocks of 512, one fp32 scale each): |x − x̂| ≤ scale/2 +
//         qmax·2^-22·scale, zeros exact; the packed layout of QuantizedShardLayout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/core/choice.h"

namespace strata {

enum class OuterCompression { none, fp16, bf16, int8, int4 };
inline constexpr Choices kOuterCompressionChoices{std::array{
    ChoiceWord{OuterCompression::none, "none"}, ChoiceWord{OuterCompression::fp16, "fp16"},
    ChoiceWord{OuterCompression::bf16, "bf16"}, ChoiceWord{OuterCompression::int8, "int8"},
    ChoiceWord{OuterCompression::int4, "int4"}}};
// "none" | "fp16" | "bf16" | "int8" | "int4" (diloco.compression); else an Error.
OuterCompression outer_compression_from_name(const std::string& name);

// Bytes that `count` values take in `format`.
std::size_t compressed_bytes(std::size_t count, OuterCompression format);
// out (compressed_bytes) = x in `format`; and back, added: out[i] += x̂[i].
void compress(const float* x, std::size_t count, OuterCompression format, std::uint8_t* out);
void decompress_add(const std::uint8_t* in, std::size_t count, OuterCompression format, float* out);

// Error feedback over a vector of `count` values.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(std::size_t count) : residual_(count, 0.0f) {}
  // Compresses x + residual into out, and keeps residual = (x + residual) − its round trip.
  void compress(const float* x, OuterCompression format, std::uint8_t* out);
  const std::vector<float>& residual() const { return residual_; }
  std::vector<float>& residual() { return residual_; }  // checkpoints restore it

 private:
  std::vector<float> residual_;
  std::vector<float> corrected_;
};

}  // namespace strata
