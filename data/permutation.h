// A keyed pseudo-random bijection on [0, n) computed pointwise in O(1) memory: the data order of
// an epoch of any size without storing a shuffled index array.
//
// Construction: a balanced Feistel network (kRounds rounds, round function = SplitMix64 of the
// round key and the half block) permutes [0, 4^h) where 4^h is the smallest power of four >= n;
// "cycle walking" re-applies it until the value lands in [0, n). A Feistel network is a bijection
// for any round function, and cycle walking keeps it one on the subdomain; since 4^h < 4n, the
// expected number of walks per call is below 4.
#pragma once

#include <array>
#include <cstdint>

namespace strata {

class KeyedPermutation {
 public:
  KeyedPermutation(std::uint64_t n, std::uint64_t key);

  std::uint64_t size() const { return n_; }
  // The image of x (x < size()).
  std::uint64_t operator()(std::uint64_t x) const;

 private:
  static constexpr int kRounds = 6;
  std::uint64_t feistel(std::uint64_t x) const;

  std::uint64_t n_;
  int half_bits_ = 0;
  std::uint64_t half_mask_ = 0;
  std::array<std::uint64_t, kRounds> round_keys_{};
};

}  // namespace strata
