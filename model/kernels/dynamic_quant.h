// Dynamic 8-bit quantisation of optimizer moments (the 8-bit optimizers' idea, Dettmers et al.
// 2022, arXiv 2110.02861: a non-linear code whose steps grow with the magnitude, so that values
// many orders of magnitude below a block's largest keep a few significant bits). The arithmetic is
// written once for the CPU optimizer (train/optimizer/adamw8bit.h) and a CUDA kernel, which take
// the code tables by pointer (a device copies them to its own memory).
//
// Codes. A block of values is stored as one byte per value and one fp32 scale, the block's
// largest magnitude a; value x is stored as the code whose table value is nearest to x/a, and read
// back as table[code]·a. The tables are decades: decade e (values in (10^-(e+1), 10^-e]) holds
// n_e codes 10^-e·(0.1 + 0.9·k/n_e), k = 1 … n_e, with more codes in the upper decades.
//   signed (the first moment m):    code c in [-127, 127], value sign(c)·magnitude[|c|];
//     magnitude[0] = 0, decades e = 0 … 6 with n_e = 2^(6−e) codes (64, 32, …, 1): 127 magnitudes
//   unsigned (the second moment v): code c in [0, 255], value unsigned_code[c];
//     unsigned_code[0] = 0, decades e = 0 … 7 with n_e = 2^(7−e) codes (128, 64, …, 1)
// Both tables end at exactly 1, so a block's largest value is stored exactly, and are ascending.
//
// Error bound. The code is the nearest one (ties to the smaller magnitude), so for |x| ≤ a
//   |x − read(code)| ≤ a · (half the gap between the two codes around |x|/a),
// which is at most a·0.45/n_0 in the top decade (m: a·0.0070, v: a·0.0035), 10× less per decade
// down, and below the smallest code (m: 1e-6·a, v: 1e-7·a) the distance to it or to 0. Relative to
// |x|, a value in decade e is within 4.5/n_e of itself (m: 7% in the top decade, v: 3.5%). One
// exception: a positive v is never stored as 0 (it takes the smallest code, 1e-7·a, error
// ≤ 1e-7·a), since a zero second moment under a non-zero first one would make AdamW's next step
// m/eps, unbounded (tests/unit/adamw8bit_test.cpp checks every bound).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "model/core/host_device.h"

namespace strata {

inline constexpr int kSignedMagnitudes = 128;  // magnitude[0 … 127]
inline constexpr int kUnsignedCodes = 256;

// The tables above, in fp32 (each value rounded once from double).
struct DynamicCodes {
  std::array<float, kSignedMagnitudes> magnitude;
  std::array<float, kUnsignedCodes> unsigned_code;
};

namespace detail {
// Fills table[1 …] with decades e = top … 0 (ascending values): n_e = 2^(top − e) codes each.
template <std::size_t N>
void fill_decades(std::array<float, N>& table, int top) {
  table[0] = 0.0f;
  std::size_t at = 1;
  for (int e = top; e >= 0; --e) {
    const int n = 1 << (top - e);
    const double unit = std::pow(10.0, -e);
    for (int k = 1; k <= n; ++k)
      table[at++] = static_cast<float>(unit * (0.1 + 0.9 * static_cast<double>(k) / n));
  }
}
}  // namespace detail

inline const DynamicCodes& dynamic_codes() {
  static const DynamicCodes codes = [] {
    DynamicCodes c{};
    detail::fill_decades(c.magnitude, 6);
    detail::fill_decades(c.unsigned_code, 7);
    return c;
  }();
  return codes;
}

// The index of the entry of ascending `table` (n entries, table[0] = 0, table[n−1] = 1) nearest
// to y in [0, 1] (ties to the lower index); y above 1 takes the last.
STRATA_HOST_DEVICE inline int nearest_code(const float* table, int n, float y) {
  int lo = 0, hi = n - 1;  // table[lo] <= y < table[hi], or y at or past the ends
  if (!(y > 0.0f)) return 0;
  if (y >= table[hi]) return hi;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (table[mid] <= y)
      lo = mid;
    else
      hi = mid;
  }
  return (y - table[lo] <= table[hi] - y) ? lo : hi;
}

// m: x of a block whose largest magnitude is `scale` (0: the block is all zeros).
STRATA_HOST_DEVICE inline std::int8_t quantize_signed(const float* magnitude, float x,
                                                      float scale) {
  if (!(scale > 0.0f)) return 0;
  const int c = nearest_code(magnitude, kSignedMagnitudes, fabsf(x) / scale);
  return static_cast<std::int8_t>(x < 0.0f ? -c : c);
}
STRATA_HOST_DEVICE inline float dequantize_signed(const float* magnitude, std::int8_t code,
                                                  float scale) {
  const float value = magnitude[code < 0 ? -code : code] * scale;
  return code < 0 ? -value : value;
}

// v (non-negative): a positive value never takes code 0.
STRATA_HOST_DEVICE inline std::uint8_t quantize_unsigned(const float* table, float x, float scale) {
  if (!(scale > 0.0f) || !(x > 0.0f)) return 0;
  const int c = nearest_code(table, kUnsignedCodes, x / scale);
  return static_cast<std::uint8_t>(c == 0 ? 1 : c);
}
STRATA_HOST_DEVICE inline float dequantize_unsigned(const float* table, std::uint8_t code,
                                                    float scale) {
  return table[code] * scale;
}

}  // namespace strata
