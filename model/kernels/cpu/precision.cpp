#include "model/kernels/cpu/precision.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <omp.h>

#include "model/core/error.h"

namespace strata::cpu {
namespace {

constexpr float kFp16MaxFinite = 65504.0f;
// Halfway between 65504 and 2^16: from here on round-to-nearest-even gives 2^16, which overflows
// (65504 has an odd significand, so the tie goes up).
constexpr float kFp16Overflow = 65520.0f;
constexpr float kFp16MinNormal = 6.103515625e-05f;  // 2^-14
// Adding 0.5 (= 2^-1, whose float ulp is 2^-24, fp16's subnormal spacing) rounds a value below
// 2^-14 to a multiple of 2^-24 with the FPU's round-to-nearest-even; subtracting it is exact.
constexpr float kFp16SubnormalMagic = 0.5f;

// A quiet NaN with x's sign and the top of its payload: what a NaN becomes in the narrow format,
// read back as fp32 (setting the quiet bit keeps it a NaN even if the kept payload bits are 0).
float quiet_nan_keeping(std::uint32_t bits, std::uint32_t kept_mask) {
  return std::bit_cast<float>((bits & kept_mask) | 0x7fc00000u);
}

}  // namespace

ComputeDtype compute_dtype_from_name(std::string_view name) {
  if (const auto dtype = kComputeDtypeChoices.find(name)) return *dtype;
  fail("unknown compute dtype '", name, "' (expected ", kComputeDtypeChoices.list(), ")");
}

const char* compute_dtype_name(ComputeDtype dtype) {
  return kComputeDtypeChoices.word(dtype).data();  // the table's words are string literals
}

// bf16 is the top half of an fp32: add just under half of the dropped 16 bits' range, plus the
// lowest kept bit (so exact ties go to the even neighbour), and truncate. The carry propagates
// into the exponent, which handles the rounding of subnormals, of values up to the next binade,
// and of the largest finite values up to +inf (0x7f7f8000 and above become 0x7f800000).
float round_to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return quiet_nan_keeping(bits, 0xffff0000u);
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(rounded & 0xffff0000u);
}

// fp16 keeps 11 of fp32's 24 significant bits in its normal range (the same carry trick on the
// low 13 bits), rounds to a fixed spacing of 2^-24 below it (the magic-number addition), and
// overflows to inf from 65520 on.
float round_to_fp16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return quiet_nan_keeping(bits, 0xffffe000u);
  const float magnitude = std::fabs(x);
  float rounded;
  if (magnitude >= kFp16Overflow) {
    rounded = std::numeric_limits<float>::infinity();
  } else if (magnitude >= kFp16MinNormal) {
    const std::uint32_t m = std::bit_cast<std::uint32_t>(magnitude);
    rounded = std::bit_cast<float>((m + 0xfffu + ((m >> 13) & 1u)) & 0xffffe000u);
  } else {
    rounded = (magnitude + kFp16SubnormalMagic) - kFp16SubnormalMagic;
  }
  return std::copysign(rounded, x);
}

double round_to_format(double x, int significant_bits, int min_exponent, double max_finite) {
  if (!std::isfinite(x) || x == 0) return x;
  int exponent = 0;
  std::frexp(x, &exponent);  // |x| = m·2^exponent, m in [0.5, 1): leading bit at exponent − 1
  // Below the normal range the spacing stops shrinking: that is what makes subnormals.
  const int leading = std::max(exponent - 1, min_exponent);
  const int spacing = leading - (significant_bits - 1);  // log2 of the spacing of the format
  // Scaling by powers of two is exact; nearbyint rounds to nearest even in the default mode.
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(x, -spacing)), spacing);
  if (std::fabs(rounded) > max_finite) return std::copysign(HUGE_VAL, x);
  return rounded;
}

void round_span(float* data, long n, ComputeDtype dtype) {
  if (dtype == ComputeDtype::bf16) {
    for (long i = 0; i < n; ++i) data[i] = round_to_bf16(data[i]);
  } else if (dtype == ComputeDtype::fp16) {
    for (long i = 0; i < n; ++i) data[i] = round_to_fp16(data[i]);
  }
}

void round_span(double* data, long n, ComputeDtype dtype) {
  if (dtype == ComputeDtype::fp32) return;
  const bool bf16 = dtype == ComputeDtype::bf16;
  const int bits = bf16 ? 8 : 11;
  const int min_exponent = bf16 ? -126 : -14;
  const double max_finite =
      bf16 ? static_cast<double>(std::bit_cast<float>(0x7f7f0000u)) : kFp16MaxFinite;
  for (long i = 0; i < n; ++i) data[i] = round_to_format(data[i], bits, min_exponent, max_finite);
}

namespace {
// Each thread rounds one contiguous part of data[0..n).
template <class T>
void round_in_parallel(T* data, long n, ComputeDtype dtype) {
  if (dtype == ComputeDtype::fp32) return;
#pragma omp parallel
  {
    const long t = omp_get_thread_num(), team = omp_get_num_threads();
    const long begin = n * t / team, end = n * (t + 1) / team;
    round_span(data + begin, end - begin, dtype);
  }
}
}  // namespace

void round_to_dtype(float* data, long n, ComputeDtype dtype) { round_in_parallel(data, n, dtype); }
void round_to_dtype(double* data, long n, ComputeDtype dtype) { round_in_parallel(data, n, dtype); }

}  // namespace strata::cpu
