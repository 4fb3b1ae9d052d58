// Elementwise math that the compiler can vectorise, for the CPU kernels' hot loops.
//
// glibc's expf/tanhf are scalar calls (without -ffast-math GCC does not use libmvec), and in the
// tanh-GELU they cost more than the MLP GEMMs around them. `exp_approx(float)` is branch-free
// arithmetic that GCC turns into SIMD code inside `#pragma omp simd` loops; its relative error is
// within about 2 ulp of expf on the whole float range it is used for. The double overload is the
// exact std::exp: double instantiations exist for the finite-difference gradient checks, which
// want reference accuracy, not speed.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace strata::cpu {

// e^x for float x. The argument is clamped to [-87, 87], so the result is always a normal float,
// and so is its reciprocal (no slow denormals, no 0 or +inf): e^-87 ≈ 1.6e-38 is the smallest
// value (callers add it to sums ≥ 1 or scale probabilities by it, where it is as good as 0) and
// e^87 ≈ 6.1e37 the largest.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 split so n·kLn2Hi is exact for |n| < 2^10 (kLn2Hi has 12 significant bits).
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  x = x < -87.0f ? -87.0f : x;
  x = x > 87.0f ? 87.0f : x;
  // x = n·ln2 + r with n an integer and |r| <= ln2/2.
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));
  // e^r by its Taylor series to r^7: the first omitted term is below 0.35^8/8! ≈ 5e-9.
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^n built in the exponent field; n is in [-126, 127], so the result is a normal float.
  const float scale = std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
  return p * scale;
}

inline double exp_approx(double x) { return std::exp(x); }

}  // namespace strata::cpu
