// Rotary position embeddings (RoPE, Su et al. 2021, as in Llama and GPT-NeoX), written once for the
// CPU reference (model/kernels/cpu/rope.h) and the CUDA kernel (model/kernels/cuda/rope.h), so both
// compute the same angles with the same operations.
//
// Pairing: rotate-half, Hugging Face transformers' Llama convention (`rotate_half`), so that an HF
// checkpoint's q and k weights need no permutation: in a head of hs elements, element i is paired
// with element i + hs/2, for i < hs/2, and the pair turns by angle p·θ_i at position p:
//   θ_i = theta^(−2i/hs)                  (theta: model.rope_theta, 10000; 500000 for Llama 3)
//   y_i        = x_i·cos(p·θ_i) − x_{i+hs/2}·sin(p·θ_i)
//   y_{i+hs/2} = x_{i+hs/2}·cos(p·θ_i) + x_i·sin(p·θ_i)
// The backward pass is the transpose, a turn by −p·θ_i (the same cos, the sine negated). The op is
// linear and its backward needs no saved input.
//
// The angle. p·θ_i reaches 10^5 and more at long contexts; an fp32 product (Hugging Face's own
// `inv_freq @ position_ids` in fp32) is off by up to p·θ·2^-24 before any sine is taken: 0.008 rad
// at p = 131072, growing with p, and no longer a function of the distance between two positions
// only. Here θ_i and p·θ_i are doubles (rope_frequency, rope_reduced_angle), p·θ_i is reduced to
// [−π, π] in double, and only that reduced angle is rounded to the compute type for the sine and
// cosine (fp32 on the GPU). Its error is then half an fp32 ulp of π (1.2e-7 rad) plus p·θ·2e-15
// from the double arithmetic (θ_i's exponent and pow, the product, 2π's rounding: 2e-9 rad at
// p·θ = 10^6), and the fp32 sine and cosine add their own few ulps: CPU and GPU agree with each
// other, and with an exact double-precision RoPE, to below 4e-7 per unit of input (|x_i| +
// |x_{i+hs/2}|) at positions up to 10^7 (the CPU test's bound: 1e-6).
//
// Shared with the GPU bit for bit: the reduced angle (IEEE double operations and one fma; pow is
// the libraries' own and may differ in the last bit of a double, 2e-16 relative, which the rounding
// to fp32 then almost always hides). Not bit for bit: the fp32 sine and cosine (glibc's and CUDA's,
// ≤ 2 ulp apart) and hence the rotated values, to a few fp32 ulps.
#pragma once

#include <climits>
#include <cmath>

#include "model/core/error.h"
#include "model/core/host_device.h"

namespace strata {

// Which elements of which rows an in-place RoPE call rotates, and their positions. The rows are
// B sequences of T rows each, row t of sequence b at `data + rope_row(b, t)·row_stride` (b·T + t
// unless sequence_rows says otherwise); in each row, `heads` heads
// of head_size elements lie contiguously from column `column`. Row t of every sequence has position
// t + position_offset (the KV-cache decoder's cache_begin, a context-parallel chunk's start).
//
// The packed qkv of model/kernels/cpu/attention.h, (B, T, 3C) with C = NH·hs, holds per row the NH
// q heads, then the NH k heads, then the NH v heads: q and k are the 2·NH heads from column 0, one
// call (rope_qk_layout). A grouped-query row [q: NH heads | k: KV heads | v: KV heads] has its
// NH + KV heads to rotate from column 0 as well, in a row of (NH + 2·KV)·hs: one call again
// (rope_qk_layout with kv_heads = KV). Any other layout (q and k in separate tensors or apart)
// takes one call per tensor, each with its own column, heads and row_stride.
struct RopeLayout {
  int B = 0;                // sequences
  int T = 0;                // rows per sequence
  long row_stride = 0;      // elements from one row to the next
  int column = 0;           // the first rotated element of a row
  int heads = 0;            // heads rotated, contiguous from `column`
  int head_size = 0;        // hs, even
  int position_offset = 0;  // position of row t: t + position_offset
  double theta = 10000.0;   // the base of the frequencies
  // Rows from one sequence's first row to the next's: T (0) when the sequences are contiguous,
  // more when each is one chunk of a longer run of rows (a context-parallel member's halves).
  long sequence_rows = 0;
};

// Row t of sequence b, counted in rows from `data`.
STRATA_HOST_DEVICE inline long rope_row(const RopeLayout& l, long b, long t) {
  return b * (l.sequence_rows > 0 ? l.sequence_rows : l.T) + t;
}

// The q and k heads of the packed attention input, rows [q: NH heads | k: kv_heads | v: kv_heads]
// of head_size each; kv_heads = NH is the multi-head qkv (B, T, 3C).
inline RopeLayout rope_qk_layout(int B, int T, int NH, int kv_heads, int head_size,
                                 int position_offset, double theta) {
  return RopeLayout{B,
                    T,
                    static_cast<long>(NH + 2 * kv_heads) * head_size,
                    0,
                    NH + kv_heads,
                    head_size,
                    position_offset,
                    theta};
}

// The layout's invariants (caller errors, not user input: STRATA_CHECK).
inline void check_rope_layout(const RopeLayout& l) {
  STRATA_CHECK(l.B >= 0 && l.T >= 0 && l.heads >= 0 && l.column >= 0, "rope: B ", l.B, ", T ", l.T,
               ", heads ", l.heads, ", column ", l.column);
  STRATA_CHECK(l.head_size > 0 && l.head_size % 2 == 0, "rope: head size ", l.head_size,
               " is not a positive even number");
  STRATA_CHECK(l.column + static_cast<long>(l.heads) * l.head_size <= l.row_stride, "rope: heads ",
               l.heads, " of ", l.head_size, " from column ", l.column, " pass the row of ",
               l.row_stride);
  STRATA_CHECK(l.position_offset >= 0 && l.position_offset <= INT_MAX - l.T,
               "rope: positions from ", l.position_offset, " over ", l.T, " rows");
  STRATA_CHECK(l.theta > 0.0, "rope: theta ", l.theta, " is not positive");
  STRATA_CHECK(l.sequence_rows == 0 || l.sequence_rows >= l.T, "rope: sequences ", l.sequence_rows,
               " rows apart overlap their ", l.T, " rows");
}

// θ_i = theta^(−2i/hs), i = pair < hs/2.
STRATA_HOST_DEVICE inline double rope_frequency(int pair, int head_size, double theta) {
  using std::pow;
  return pow(theta, -2.0 * pair / head_size);
}

// p·θ minus the nearest multiple of 2π, in [−π, π]. The fma subtracts the exact product
// turns·fl(2π); fl(2π)'s own error, turns·2π·2^-53, is that of p·θ's rounding.
STRATA_HOST_DEVICE inline double rope_reduced_angle(int position, double frequency) {
  using std::fma, std::rint;
  constexpr double kTwoPi = 6.283185307179586;
  constexpr double kInverseTwoPi = 0.15915494309189535;
  const double angle = position * frequency;
  return fma(-rint(angle * kInverseTwoPi), kTwoPi, angle);
}

// cos and sin of p·θ in T (float on the GPU and in the CPU's float kernels, double in the CPU's
// double ones), from the reduced angle rounded to T.
template <class T>
STRATA_HOST_DEVICE inline void rope_cos_sin(int position, double frequency, T& cosine, T& sine) {
  const T angle = static_cast<T>(rope_reduced_angle(position, frequency));
#if defined(__CUDA_ARCH__)
  sincosf(angle, &sine, &cosine);  // the device instantiates only T = float
#else
  cosine = std::cos(angle);
  sine = std::sin(angle);
#endif
}

// One pair (x_i, x_{i+hs/2}) turned by the angle of (cosine, sine); the backward pass passes
// −sine.
template <class T>
STRATA_HOST_DEVICE inline void rope_rotate_pair(T& first, T& second, T cosine, T sine) {
  const T x0 = first, x1 = second;
  first = x0 * cosine - x1 * sine;
  second = x1 * cosine + x0 * sine;
}

}  // namespace strata
