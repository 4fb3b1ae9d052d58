// Inputs of the block quantiser tests (tests/unit/ops_quantize_test.cpp against the stated bound,
// tests/cuda/quantize_test.cu against the CPU reference): gradient-like values whose magnitude
// changes from block to block, and the adversarial values every quantiser must survive.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace strata::testing {

// Normal values times 2^e, e uniform in [−30, 30] and redrawn every 97 values (so neighbouring
// blocks get very different scales), with about one exact zero in 13.
inline std::vector<float> varied_magnitudes(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> x(n);
  float magnitude = 1.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 97 == 0) magnitude = std::ldexp(1.0f, exponent(rng));
    x[i] = rng() % 13 == 0 ? 0.0f : magnitude * normal(rng);
  }
  return x;
}

// Denormals (190·2^-149 would lose its scale to rounding without the FLT_MIN floor), the extremes
// of the float range, signed zero, and values halfway between multiples of 1/8 (exact half steps
// in a block whose scale is 1/8).
inline std::vector<float> adversarial_values() {
  return {std::ldexp(190.0f, -149),
          -std::ldexp(1.0f, -149),
          FLT_MIN,
          -FLT_MIN / 2,
          FLT_MAX,
          -FLT_MAX,
          -0.0f,
          0.125f * 126.5f,
          0.125f * 3.5f,
          -0.125f * 0.5f};
}

// varied_magnitudes with the adversarial values spread in, one every 211 values while they last.
inline std::vector<float> quantizer_inputs(std::size_t n, std::mt19937_64& rng) {
  std::vector<float> x = varied_magnitudes(n, rng);
  const std::vector<float> adversarial = adversarial_values();
  for (std::size_t i = 0; i < adversarial.size() && i * 211 < n; ++i) x[i * 211] = adversarial[i];
  return x;
}

}  // namespace strata::testing
