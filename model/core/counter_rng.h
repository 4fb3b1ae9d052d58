// Counter-based randomness: every random quantity is a pure function of global coordinates
// (seed, a name or stream id, an index), never of rank, layout or call order. This is what lets any
// parallel layout reproduce the single-process run and lets resumed runs continue bit-exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace strata {

// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche (Steele et al., 2014).
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b) {
  return mix64(a ^ mix64(b));
}

// FNV-1a over the bytes of a name: stable across builds and platforms.
constexpr std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// Uniform in (0, 1): 53 random bits, never exactly 0 so log() is safe.
inline double uniform_open01(std::uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal for element `index` of the stream `key` (Box-Muller on two counter draws).
inline double counter_normal(std::uint64_t key, std::uint64_t index) {
  const double u1 = uniform_open01(hash_combine(key, 2 * index));
  const double u2 = uniform_open01(hash_combine(key, 2 * index + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace strata
