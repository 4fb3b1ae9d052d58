// FP8 numbers (docs/ARCHITECTURE.md §6, "FP8"): the OCP 8-bit floating-point formats Hopper's
// tensor cores multiply, and the scales that bring a tensor into their range, written once for the
// CPU's emulation and the GPU's casts, so that both round alike.
//   e4m3  4 exponent bits (bias 7), 3 mantissa bits; no infinities: S.1111.111 is NaN, the largest
//         finite value S.1111.110 = ±448; the smallest subnormal 2^-9.
//   e5m2  5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is ±infinity,
//         S.11111.xx (xx ≠ 0) NaN; the largest finite value ±57344; the smallest subnormal 2^-16.
// fp8_encode rounds to nearest, ties to even, and saturates: a finite value (or infinity) beyond
// the largest finite one becomes ±that largest value (the "satfinite" conversion of Transformer
// Engine's recipes and of cuda_fp8.h's __NV_SATFINITE); NaN stays NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/core/host_device.h"

namespace strata {

enum class Fp8Format { e4m3, e5m2 };

// What one scale covers in an operand x (rows, cols): all of it, one row, or one column.
enum class Fp8Axis { tensor, rows, columns };

// The format's exponent bits, mantissa bits and bias.
struct Fp8Layout {
  int exponent_bits, mantissa_bits, bias;
};

STRATA_HOST_DEVICE inline Fp8Layout fp8_layout(Fp8Format format) {
  return format == Fp8Format::e4m3 ? Fp8Layout{4, 3, 7} : Fp8Layout{5, 2, 15};
}

// The largest finite magnitude: 448 (e4m3), 57344 (e5m2).
STRATA_HOST_DEVICE inline float fp8_max(Fp8Format format) {
  return format == Fp8Format::e4m3 ? 448.0f : 57344.0f;
}

// The code of the largest finite value: 0x7E (e4m3), 0x7B (e5m2).
STRATA_HOST_DEVICE inline std::uint8_t fp8_max_code(Fp8Format format) {
  return format == Fp8Format::e4m3 ? 0x7E : 0x7B;
}

// The code of NaN this module writes: 0x7F (e4m3), 0x7E (e5m2).
STRATA_HOST_DEVICE inline std::uint8_t fp8_nan(Fp8Format format) {
  return format == Fp8Format::e4m3 ? 0x7F : 0x7E;
}

STRATA_HOST_DEVICE inline float fp8_decode(std::uint8_t code, Fp8Format format) {
  using std::ldexp;
  const Fp8Layout l = fp8_layout(format);
  const bool negative = (code & 0x80) != 0;
  const int field = (code >> l.mantissa_bits) & ((1 << l.exponent_bits) - 1);
  const int mantissa = code & ((1 << l.mantissa_bits) - 1);
  const int top = (1 << l.exponent_bits) - 1;
  float value;
  if (format == Fp8Format::e4m3 && field == top && mantissa == (1 << l.mantissa_bits) - 1) {
    value = NAN;
  } else if (format == Fp8Format::e5m2 && field == top) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else if (field == 0) {  // subnormal: m · 2^(1 − bias − M)
    value = ldexp(static_cast<float>(mantissa), 1 - l.bias - l.mantissa_bits);
  } else {  // (2^M + m) · 2^(field − bias − M)
    value = ldexp(static_cast<float>((1 << l.mantissa_bits) + mantissa),
                  field - l.bias - l.mantissa_bits);
  }
  return negative ? -value : value;
}

STRATA_HOST_DEVICE inline std::uint8_t fp8_encode(float x, Fp8Format format) {
  using std::fabs, std::frexp, std::ldexp, std::rint;
  if (x != x) return fp8_nan(format);
  const Fp8Layout l = fp8_layout(format);
  const std::uint8_t sign = x < 0.0f || (x == 0.0f && std::signbit(x)) ? 0x80 : 0x00;
  float a = fabs(x);
  const float largest = fp8_max(format);
  if (a >= largest) return sign | fp8_max_code(format);  // saturate (infinity too)
  // The quantum at a's binade (a = f · 2^e, f in [0.5, 1)): 2^(e − 1 − M), never below the
  // subnormals' 2^(1 − bias − M). a / quantum is exact (a power of two apart); rint rounds it to
  // nearest, ties to even, in the default rounding mode.
  int e = 0;
  frexp(a, &e);
  const int min_exponent = 1 - l.bias;  // the smallest normal's: 2^(1 − bias)
  const int scale = (e - 1 < min_exponent ? min_exponent : e - 1) - l.mantissa_bits;
  const float steps = rint(ldexp(a, -scale));  // a in quanta, rounded
  a = ldexp(steps, scale);
  if (a > largest) return sign | fp8_max_code(format);
  // Re-encode the rounded value (rounding may have carried it into the next binade).
  if (a < ldexp(1.0f, min_exponent))  // subnormal: the mantissa field is a / 2^(1 − bias − M)
    return sign | static_cast<std::uint8_t>(ldexp(a, l.bias - 1 + l.mantissa_bits));
  frexp(a, &e);
  const int field = e - 1 + l.bias;
  const int mantissa =
      static_cast<int>(ldexp(a, l.mantissa_bits - (e - 1))) - (1 << l.mantissa_bits);
  return sign | static_cast<std::uint8_t>((field << l.mantissa_bits) | mantissa);
}

// x through the format and back: what an FP8 GEMM's operand holds.
STRATA_HOST_DEVICE inline float fp8_round(float x, Fp8Format format) {
  return fp8_decode(fp8_encode(x, format), format);
}

// fp8_round for a finite x by float arithmetic alone (no encode and decode): the emulation's fast
// path, bitwise fp8_round for every finite float (tests/unit/model_fp8_test.cpp). Normal values:
// the float's mantissa rounded to M bits, to nearest even, on its bits; below the format's normal
// range: x rounded to a multiple of the smallest subnormal by adding and subtracting a power of two
// whose ulp that is (round to nearest even, the default mode); beyond the largest value: it.
STRATA_HOST_DEVICE inline float fp8_round_finite(float x, Fp8Format format) {
  using std::copysign, std::fabs, std::ldexp;
  const Fp8Layout l = fp8_layout(format);
  const float a = fabs(x), largest = fp8_max(format);
  float r;
  if (a < ldexp(1.0f, 1 - l.bias)) {
    const float c = ldexp(1.0f, 1 - l.bias - l.mantissa_bits + 23);
    volatile float sum = a + c;  // volatile: the rounding must happen, not fold away
    r = sum - c;
  } else {
    std::uint32_t bits;
    std::memcpy(&bits, &a, sizeof bits);
    const int drop = 23 - l.mantissa_bits;
    bits += ((1u << (drop - 1)) - 1u) + ((bits >> drop) & 1u);
    bits &= ~((1u << drop) - 1u);
    std::memcpy(&r, &bits, sizeof r);
  }
  return copysign(r > largest ? largest : r, x);
}

// The scale that brings a tensor whose largest magnitude is `amax` into the format's range: the
// largest power of two 2^k with amax · 2^k <= fp8_max (so amax lands in [max/2, max]). Powers of
// two make the scaling and its inverse exact: the dequantized operand q · 2^-k is exactly what the
// tensor cores multiply before cuBLASLt's scale factors, so the CPU's emulation (quantize,
// dequantize, multiply in fp32) holds the very operand values the GPU's FP8 GEMM does. The cost
// is at most one binade of range at the bottom (subnormals), not precision. An amax of 0 (nothing
// to scale) or not finite (the step is lost anyway: fp8_quantize makes such values NaN) gives 1.
// k stays where both the scale and every dequantized value are finite floats: at most 127 (an
// amax below about 2^-118 then lands under max/2), and at least max_exponent − 128, so that
// fp8_max · 2^-k <= FLT_MAX (−119 for e4m3, −112 for e5m2: an amax above about 2^119 or 2^112
// saturates its largest values instead).
STRATA_HOST_DEVICE inline float fp8_scale(float amax, Fp8Format format) {
  using std::frexp, std::ldexp;
  if (!(amax > 0.0f) || !(amax <= 3.4028235e38f)) return 1.0f;
  int amax_exponent = 0, max_exponent = 0;
  const float amax_fraction = frexp(amax, &amax_exponent);  // in [0.5, 1)
  const float max_fraction = frexp(fp8_max(format), &max_exponent);
  int k = max_exponent - amax_exponent - (max_fraction < amax_fraction ? 1 : 0);
  const int lowest = max_exponent - 128;
  k = k < lowest ? lowest : (k > 127 ? 127 : k);
  return ldexp(1.0f, k);
}

// The code of x · scale (fp8_encode: nearest, ties to even, saturating). A value that is not
// finite becomes NaN, in both formats: saturating an overflowed activation would hide it from the
// non-finite check (train.nonfinite), which must see the step fail.
STRATA_HOST_DEVICE inline std::uint8_t fp8_quantize(float x, float scale, Fp8Format format) {
  if (!(x - x == 0.0f)) return fp8_nan(format);  // infinity or NaN
  return fp8_encode(x * scale, format);
}

// A code back to the tensor's units: decode(code) / scale, exact for fp8_scale's powers of two.
STRATA_HOST_DEVICE inline float fp8_dequantize(std::uint8_t code, float scale, Fp8Format format) {
  return fp8_decode(code, format) / scale;
}

// The largest magnitude among n values, +infinity when one is not finite (the scale's input).
STRATA_HOST_DEVICE inline float fp8_amax_step(float amax, float x) {
  using std::fabs;
  if (!(x - x == 0.0f)) return INFINITY;
  const float a = fabs(x);
  return a > amax ? a : amax;
}

}  // namespace strata
