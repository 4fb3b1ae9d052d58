// The FP8 casts (model/kernels/fp8.h) against the formats' definitions: every code decodes to the
// value its fields give (the largest finite, the smallest subnormal, 1, infinity and NaN at their
// codes); every finite code encodes back to itself; and encoding any float gives the nearest code,
// ties to the even mantissa, saturating at the largest finite value: checked against a brute-force
// search over all 256 codes, on values between codes, at midpoints and beyond the range. The
// scales are the powers of two that bring a tensor's amax into the format's top binade, and a
// value that is not finite quantizes to NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "model/kernels/fp8.h"

namespace strata {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

// The code a correct cast gives: the finite code nearest x (ties: the even code), saturating.
std::uint8_t nearest_code(float x, Fp8Format format) {
  if (std::isnan(x)) return fp8_nan(format);
  const float clamped = std::fmax(-fp8_max(format), std::fmin(fp8_max(format), x));
  int best = -1;
  double best_distance = INFINITY;
  for (int code = 0; code < 256; ++code) {
    const float value = fp8_decode(static_cast<std::uint8_t>(code), format);
    if (!std::isfinite(value) || std::signbit(value) != std::signbit(clamped)) continue;
    const double distance = std::fabs(static_cast<double>(value) - clamped);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return static_cast<std::uint8_t>(best);
}

TEST(Fp8, CodesDecodeToTheirFields) {
  EXPECT_EQ(fp8_decode(0x7E, Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_decode(0x01, Fp8Format::e4m3), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_decode(0x08, Fp8Format::e4m3), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_decode(0x38, Fp8Format::e4m3), 1.0f);
  EXPECT_EQ(fp8_decode(0xC0, Fp8Format::e4m3), -2.0f);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, Fp8Format::e4m3)));
  EXPECT_TRUE(std::isnan(fp8_decode(0xFF, Fp8Format::e4m3)));
  EXPECT_EQ(fp8_decode(0x7B, Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8_decode(0x01, Fp8Format::e5m2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_decode(0x3C, Fp8Format::e5m2), 1.0f);
  EXPECT_EQ(fp8_decode(0x7C, Fp8Format::e5m2), INFINITY);
  EXPECT_EQ(fp8_decode(0xFC, Fp8Format::e5m2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7D, Fp8Format::e5m2)));
}

TEST(Fp8, EveryFiniteCodeEncodesBackToItself) {
  for (Fp8Format format : kFormats)
    for (int code = 0; code < 256; ++code) {
      const float value = fp8_decode(static_cast<std::uint8_t>(code), format);
      if (!std::isfinite(value)) continue;
      EXPECT_EQ(fp8_encode(value, format), code) << value;
    }
}

TEST(Fp8, EncodingRoundsToNearestEvenAndSaturates) {
  for (Fp8Format format : kFormats) {
    SCOPED_TRACE(format == Fp8Format::e4m3 ? "e4m3" : "e5m2");
    // Midpoints and quarter points between neighbouring codes, and each code's neighbours in
    // float.
    for (int code = 0; code < 255; ++code) {
      const float a = fp8_decode(static_cast<std::uint8_t>(code), format);
      const float b = fp8_decode(static_cast<std::uint8_t>(code + 1), format);
      if (!std::isfinite(a) || !std::isfinite(b) || std::signbit(a) != std::signbit(b)) continue;
      for (const float x : {(a + b) / 2, a + (b - a) / 4, a + 3 * (b - a) / 4, std::nextafter(a, b),
                            std::nextafter(b, a)})
        EXPECT_EQ(fp8_encode(x, format), nearest_code(x, format)) << x;
    }
    // Random magnitudes over and beyond the range, both signs.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> exponent(-24.0f, 20.0f);
    for (int i = 0; i < 20000; ++i) {
      const float x = (i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
      ASSERT_EQ(fp8_encode(x, format), nearest_code(x, format)) << x;
    }
    // Beyond the range: the largest finite value; NaN stays NaN; signed zero keeps its sign.
    EXPECT_EQ(fp8_round(1e30f, format), fp8_max(format));
    EXPECT_EQ(fp8_round(-INFINITY, format), -fp8_max(format));
    EXPECT_TRUE(std::isnan(fp8_round(NAN, format)));
    EXPECT_EQ(fp8_encode(-0.0f, format), 0x80);
  }
}

// The emulation's fast path is fp8_round, bit for bit: at every code, its neighbours in float,
// the midpoints between codes, and random floats over the whole finite range.
TEST(Fp8, TheFastRoundingIsTheCastsBitForBit) {
  auto same = [](float x, Fp8Format format) {
    const float want = fp8_round(x, format), got = fp8_round_finite(x, format);
    return std::memcmp(&want, &got, sizeof want) == 0;
  };
  for (Fp8Format format : kFormats) {
    for (int code = 0; code < 255; ++code) {
      const float a = fp8_decode(static_cast<std::uint8_t>(code), format);
      const float b = fp8_decode(static_cast<std::uint8_t>(code + 1), format);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      for (const float x : {a, (a + b) / 2, std::nextafter(a, b), std::nextafter((a + b) / 2, a),
                            std::nextafter((a + b) / 2, b)})
        ASSERT_TRUE(same(x, format)) << x;
    }
    std::mt19937 rng(5);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (int i = 0; i < 2000000; ++i) {
      std::uint32_t b = bits(rng);
      float x;
      std::memcpy(&x, &b, sizeof x);
      if (!std::isfinite(x)) continue;
      ASSERT_TRUE(same(x, format)) << x;
    }
  }
}

TEST(Fp8, ScalesArePowersOfTwoThatBringTheAmaxIntoTheTopBinade) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-40.0f, 40.0f);
  for (Fp8Format format : kFormats)
    for (int i = 0; i < 5000; ++i) {
      const float amax = std::exp2(exponent(rng));
      const float scale = fp8_scale(amax, format);
      int e = 0;
      ASSERT_EQ(std::frexp(scale, &e), 0.5f) << amax;  // a power of two
      // amax · scale in (max/2, max]: the largest such power (within the clamps, which
      // 2^±40 stays inside).
      EXPECT_LE(amax * scale, fp8_max(format)) << amax;
      EXPECT_GT(amax * scale * 2, fp8_max(format)) << amax;
      // Its inverse is exact: a code dequantized is the code's value divided exactly.
      const std::uint8_t code = fp8_quantize(amax, scale, format);
      EXPECT_EQ(fp8_dequantize(code, scale, format) * scale, fp8_decode(code, format));
    }
  // Exactly the largest finite value at amax = max; nothing to scale, or nothing finite: 1.
  EXPECT_EQ(fp8_scale(448.0f, Fp8Format::e4m3), 1.0f);
  EXPECT_EQ(fp8_scale(449.0f, Fp8Format::e4m3), 0.5f);
  EXPECT_EQ(fp8_scale(0.0f, Fp8Format::e4m3), 1.0f);
  EXPECT_EQ(fp8_scale(INFINITY, Fp8Format::e5m2), 1.0f);
  EXPECT_EQ(fp8_scale(NAN, Fp8Format::e5m2), 1.0f);
  // Within normal floats at the extremes, and every dequantized value finite: an amax near
  // FLT_MAX saturates its largest values rather than dequantizing to infinity.
  EXPECT_EQ(fp8_scale(1e-38f, Fp8Format::e4m3), std::ldexp(1.0f, 127));
  EXPECT_EQ(fp8_scale(3e38f, Fp8Format::e5m2), std::ldexp(1.0f, -112));
  EXPECT_EQ(fp8_scale(3e38f, Fp8Format::e4m3), std::ldexp(1.0f, -119));
  for (Fp8Format format : kFormats)
    for (const float amax : {3e38f, 3.4028235e38f}) {
      const float scale = fp8_scale(amax, format);
      EXPECT_EQ(fp8_dequantize(fp8_quantize(amax, scale, format), scale, format),
                fp8_max(format) / scale)
          << amax;
      EXPECT_TRUE(std::isfinite(fp8_max(format) / scale));
    }
}

TEST(Fp8, ValuesThatAreNotFiniteQuantizeToNaNNotToTheLargestValue) {
  for (Fp8Format format : kFormats) {
    EXPECT_TRUE(std::isnan(fp8_dequantize(fp8_quantize(INFINITY, 1.0f, format), 1.0f, format)));
    EXPECT_TRUE(std::isnan(fp8_dequantize(fp8_quantize(-INFINITY, 4.0f, format), 4.0f, format)));
    EXPECT_TRUE(std::isnan(fp8_dequantize(fp8_quantize(NAN, 1.0f, format), 1.0f, format)));
    // A finite value beyond the scaled range saturates (the delayed recipe's spike).
    EXPECT_EQ(fp8_dequantize(fp8_quantize(1e6f, 1.0f, format), 1.0f, format), fp8_max(format));
    EXPECT_EQ(fp8_amax_step(fp8_amax_step(0.0f, -3.0f), 2.0f), 3.0f);
    EXPECT_EQ(fp8_amax_step(1.0f, NAN), INFINITY);
  }
}

}  // namespace
}  // namespace strata
