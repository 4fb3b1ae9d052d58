#include "data/permutation.h"

#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {

KeyedPermutation::KeyedPermutation(std::uint64_t n, std::uint64_t key) : n_(n) {
  // Smallest h with 4^h = 2^(2h) >= n; at most 32 for any 64-bit n.
  while (half_bits_ < 32 && (std::uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  half_mask_ = half_bits_ == 32 ? 0xFFFFFFFFull : (std::uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) {
    round_keys_[r] = hash_combine(key, static_cast<std::uint64_t>(r));
  }
}

std::uint64_t KeyedPermutation::feistel(std::uint64_t x) const {
  std::uint64_t left = x >> half_bits_;
  std::uint64_t right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const std::uint64_t mixed = left ^ (mix64(round_keys_[r] ^ right) & half_mask_);
    left = right;
    right = mixed;
  }
  return (left << half_bits_) | right;
}

std::uint64_t KeyedPermutation::operator()(std::uint64_t x) const {
  STRATA_CHECK(x < n_, "permutation index ", x, " of ", n_);
  if (n_ <= 1) return x;
  std::uint64_t y = feistel(x);
  while (y >= n_) y = feistel(y);
  return y;
}

}  // namespace strata
