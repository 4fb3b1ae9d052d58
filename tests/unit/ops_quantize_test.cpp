// The block quantisers of ZeRO++ (model/kernels/quantize_block.h, model/kernels/cpu/quantize.h):
// the stated error bound on random and adversarial inputs, the int4 packing, the packed shard
// layout (blocks never straddle a shard, zero-sized shards), and qgZ's two-hop reduce-scatter
// (parallel/zero/qgz_order.h) simulated with n ranks in one process against the exact mean.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "model/kernels/cpu/quantize.h"
#include "model/kernels/quantize_block.h"
#include "parallel/zero/qgz_order.h"
#include "tests/support/quantize_inputs.h"

namespace strata::cpu {
namespace {

using Bytes = std::vector<std::uint8_t>;
using strata::testing::quantizer_inputs;
using strata::testing::varied_magnitudes;
constexpr QuantFormat kFormats[] = {QuantFormat::int8, QuantFormat::int4};

// The per-element bound of quantize_block.h: scale/2 + qmax·2^-22·scale.
double element_bound(float scale, QuantFormat format) {
  return 0.5 * scale + quant_max(format) * std::ldexp(1.0, -22) * scale;
}

Bytes quantized(const std::vector<float>& x, const QuantizedShardLayout& layout,
                std::size_t shards = 1) {
  Bytes packed(shards * layout.bytes);
  quantize_shards(x.data(), layout, shards, packed.data());
  return packed;
}

std::vector<float> dequantized(const Bytes& packed, const QuantizedShardLayout& layout,
                               std::size_t shards = 1) {
  std::vector<float> x(shards * layout.elements);
  dequantize_shards(packed.data(), layout, shards, x.data());
  return x;
}

// Quantises and dequantises x (one shard) and checks, block by block: the scale is quant_scale of
// the block's absmax, exact zeros stay zero, and every value is within the stated bound.
// Returns the largest |x − x̂| / scale seen.
double expect_round_trip_within_bound(const std::vector<float>& x, std::size_t block,
                                      QuantFormat format) {
  const QuantizedShardLayout layout = quantized_shard_layout(x.size(), block, format);
  const Bytes packed = quantized(x, layout);
  const std::vector<float> back = dequantized(packed, layout);
  double worst = 0;
  for (std::size_t b = 0; b < layout.blocks; ++b) {
    const float scale = packed_scale(packed.data(), layout, b);
    float absmax = 0;
    for (std::size_t i = 0; i < layout.block_length(b); ++i)
      absmax = std::max(absmax, std::fabs(x[layout.block_begin(b) + i]));
    EXPECT_EQ(scale, quant_scale(absmax, format)) << "block " << b;
    EXPECT_EQ(scale == 0.0f, absmax == 0.0f) << "block " << b;
    for (std::size_t i = layout.block_begin(b); i < layout.block_begin(b) + layout.block_length(b);
         ++i) {
      const double error = std::fabs(static_cast<double>(x[i]) - back[i]);
      if (x[i] == 0.0f) {
        EXPECT_EQ(back[i], 0.0f) << "element " << i;
      }
      EXPECT_LE(error, element_bound(scale, format))
          << "element " << i << " x " << x[i] << " x̂ " << back[i] << " scale " << scale;
      if (scale > 0) worst = std::max(worst, error / scale);
    }
  }
  return worst;
}

TEST(OpsQuantize, RandomValuesWithinHalfAStepPlusTheStatedFp32Term) {
  std::mt19937_64 rng(1);
  for (QuantFormat format : kFormats)
    for (std::size_t block : {1, 2, 7, 256, 2048}) {
      const double worst =
          expect_round_trip_within_bound(quantizer_inputs(5000, rng), block, format);
      if (block >= 256) {
        EXPECT_GT(worst, 0.45) << "the bound is nearly reached, not vacuous";
      }
    }
}

// Values exactly halfway between two steps round to the even q, an error of exactly scale/2 (the
// scale is a power of two here, so x/scale and q·scale are exact), and the floats either side of
// each half step stay within the bound.
TEST(OpsQuantize, HalfStepsRoundToEvenAndTheirNeighboursStayWithinTheBound) {
  for (QuantFormat format : kFormats) {
    const int qmax = quant_max(format);
    const float step = 0.25f, absmax = static_cast<float>(qmax) * step;
    ASSERT_EQ(quant_scale(absmax, format), step);
    std::vector<float> x = {absmax};
    for (int k = -qmax; k < qmax; ++k) x.push_back((static_cast<float>(k) + 0.5f) * step);
    const QuantizedShardLayout layout = quantized_shard_layout(x.size(), x.size(), format);
    const std::vector<float> back = dequantized(quantized(x, layout), layout);
    for (std::size_t i = 1; i < x.size(); ++i) {
      EXPECT_EQ(std::fabs(x[i] - back[i]), step / 2) << x[i];
      EXPECT_EQ(std::fmod(back[i] / step, 2.0f), 0.0f) << x[i] << " rounds to an even q";
    }
    std::vector<float> neighbours = {absmax};
    for (float v : std::vector<float>(x.begin() + 1, x.end()))
      for (float direction : {-INFINITY, INFINITY}) neighbours.push_back(nextafterf(v, direction));
    expect_round_trip_within_bound(neighbours, neighbours.size(), format);
    // A scale that is not a power of two: 1/qmax rounds, and so does every x/scale.
    std::vector<float> inexact = {1.0f};
    const float scale = quant_scale(1.0f, format);
    for (int k = -qmax; k < qmax; ++k)
      for (int ulps = -3; ulps <= 3; ++ulps) {
        float v = (static_cast<float>(k) + 0.5f) * scale;
        for (int u = 0; u < std::abs(ulps); ++u) v = nextafterf(v, ulps < 0 ? -INFINITY : INFINITY);
        inexact.push_back(v);
      }
    expect_round_trip_within_bound(inexact, inexact.size(), format);
  }
}

// The fp32 term of the bound is real: these values (found by a search over half steps) land on a
// half step only after x/scale is rounded, and round the far way.
TEST(OpsQuantize, RoundingOfXOverScaleCanExceedHalfAStepWithinTheStatedTerm) {
  struct Case {
    QuantFormat format;
    float absmax, x;
  };
  for (const Case& c : {Case{QuantFormat::int8, 0x1.34c4dp+0f, 0x1.0f159cp+0f},
                        Case{QuantFormat::int4, 0x1.e026eep-1f, 0x1.e026eep-2f}}) {
    const float scale = quant_scale(c.absmax, c.format);
    const float back = dequantize_value(quantize_value(c.x, scale, c.format), scale);
    const double error = std::fabs(static_cast<double>(c.x) - back);
    EXPECT_GT(error, 0.5 * scale);
    EXPECT_LE(error, element_bound(scale, c.format));
    expect_round_trip_within_bound({c.absmax, c.x}, 2, c.format);
  }
}

TEST(OpsQuantize, DenormalsHugeValuesAndASingleNonzero) {
  const float denormal = std::ldexp(1.0f, -149);
  for (QuantFormat format : kFormats) {
    const int qmax = quant_max(format);
    // A block of denormals, where absmax/qmax would be 0 or a denormal with few significant bits
    // (190·2^-149 / 127 rounds to 2^-149: values near absmax would clamp 63 ulps away).
    const std::vector<float> denormals = {190 * denormal, -denormal,     5 * denormal,
                                          0.0f,           63 * denormal, -190 * denormal};
    EXPECT_EQ(quant_scale(190 * denormal, format), FLT_MIN);
    expect_round_trip_within_bound(denormals, denormals.size(), format);
    expect_round_trip_within_bound({FLT_MIN, -FLT_MIN / 2, FLT_MIN * qmax * 1.5f}, 3, format);
    // Huge values: 127·fl(FLT_MAX/127) would overflow, the scale is one ulp lower.
    const std::vector<float> huge = {FLT_MAX, -FLT_MAX, nextafterf(FLT_MAX, 0.0f), 1e38f, -3e37f,
                                     1.0f,    0.0f};
    const QuantizedShardLayout layout = quantized_shard_layout(huge.size(), 3, format);
    for (float v : dequantized(quantized(huge, layout), layout)) EXPECT_TRUE(std::isfinite(v));
    expect_round_trip_within_bound(huge, 3, format);
    expect_round_trip_within_bound(huge, huge.size(), format);
    // One nonzero in a block of zeros: it becomes ±qmax·scale, every zero stays exactly zero.
    for (float v : {1e-30f, -3.7f, 5e30f}) {
      std::vector<float> single(300, 0.0f);
      single[123] = v;
      const QuantizedShardLayout one = quantized_shard_layout(single.size(), 256, format);
      const Bytes packed = quantized(single, one);
      const std::vector<float> back = dequantized(packed, one);
      EXPECT_EQ(packed_scale(packed.data(), one, 1), 0.0f);  // the all-zero second block
      EXPECT_EQ(back[123], std::copysign(qmax * packed_scale(packed.data(), one, 0), v));
      expect_round_trip_within_bound(single, 256, format);
    }
  }
}

TEST(OpsQuantize, ZeroBlocksHaveScaleZeroAndDequantiseToExactZeros) {
  for (QuantFormat format : kFormats) {
    const std::vector<float> zeros = {0.0f, -0.0f, 0.0f, 0.0f, -0.0f};
    const QuantizedShardLayout layout = quantized_shard_layout(zeros.size(), 2, format);
    const Bytes packed = quantized(zeros, layout);
    for (std::uint8_t byte : packed) EXPECT_EQ(byte, 0);  // scales 0.0f, q 0, padding 0
    for (float v : dequantized(packed, layout)) {
      EXPECT_EQ(v, 0.0f);
      EXPECT_FALSE(std::signbit(v));
    }
  }
}

TEST(OpsQuantize, NonFiniteValuesMakeTheirWholeBlockNonFinite) {
  for (QuantFormat format : kFormats)
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x(12, 0.5f);
      x[5] = bad;
      const QuantizedShardLayout layout = quantized_shard_layout(x.size(), 4, format);
      const std::vector<float> back = dequantized(quantized(x, layout), layout);
      for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(std::isfinite(back[i]), i < 4 || i >= 8) << bad << " element " << i;
    }
}

TEST(OpsQuantize, Int4NibblesRoundTripAllSixteenValues) {
  for (int byte = 0; byte < 256; ++byte) {
    const auto b = static_cast<std::uint8_t>(byte);
    const int low = unpack_int4_low(b), high = unpack_int4_high(b);
    EXPECT_EQ(low, (byte & 0xF) < 8 ? (byte & 0xF) : (byte & 0xF) - 16);
    EXPECT_EQ(high, (byte >> 4) < 8 ? (byte >> 4) : (byte >> 4) - 16);
    EXPECT_EQ(pack_int4(low, high), b);
  }
  for (int q = -8; q <= 7; ++q) {
    EXPECT_EQ(unpack_int4_low(pack_int4(q, 0)), q);
    EXPECT_EQ(unpack_int4_high(pack_int4(0, q)), q);
    // Dequantise reads every nibble, −8 included, element by element from the payload.
    const std::uint8_t payload[2] = {pack_int4(q, -q - 1), pack_int4(-1, 0)};
    EXPECT_EQ(quantized_element(payload, 0, QuantFormat::int4), q);
    EXPECT_EQ(quantized_element(payload, 1, QuantFormat::int4), -q - 1);
    EXPECT_EQ(quantized_element(payload, 2, QuantFormat::int4), -1);
  }
}

// Values on the grid of a power-of-two scale come back exactly, in both formats, for odd and even
// lengths; an odd block's last byte carries 0 in its high nibble.
TEST(OpsQuantize, PackingRoundTripsExactGridValuesIncludingOddLengths) {
  std::mt19937_64 rng(2);
  for (QuantFormat format : kFormats) {
    const int qmax = quant_max(format);
    for (std::size_t n : {1, 2, 3, 15, 16, 17, 1001}) {
      for (std::size_t block : {std::size_t{3}, std::size_t{16}, n}) {
        std::vector<float> x(n);
        for (std::size_t i = 0; i < n; ++i)
          x[i] = 0.5f * static_cast<float>(static_cast<int>(rng() % (2 * qmax + 1)) - qmax);
        for (std::size_t b = 0; b * block < n; ++b) x[b * block] = 0.5f * qmax;  // scale 0.5
        const QuantizedShardLayout layout = quantized_shard_layout(n, block, format);
        const Bytes packed = quantized(x, layout);
        EXPECT_EQ(dequantized(packed, layout), x) << n << " " << block;
        if (format == QuantFormat::int4)
          for (std::size_t b = 0; b < layout.blocks; ++b)
            if (layout.block_length(b) % 2 == 1) {
              const std::size_t last = layout.block_payload_offset(b) +
                                       quant_block_bytes(layout.block_length(b), format) - 1;
              EXPECT_EQ(packed[last] >> 4, 0) << "block " << b;
            }
      }
    }
  }
}

TEST(OpsQuantize, LayoutFormulas) {
  const QuantizedShardLayout int4 = quantized_shard_layout(5000, 2048, QuantFormat::int4);
  EXPECT_EQ(int4.blocks, 3u);
  EXPECT_EQ(int4.payload_offset, 12u);
  EXPECT_EQ(int4.payload_bytes, 1024u + 1024u + 452u);
  EXPECT_EQ(int4.bytes, 12u + 2500u);
  const QuantizedShardLayout int8 = quantized_shard_layout(5001, 2048, QuantFormat::int8);
  EXPECT_EQ(int8.payload_bytes, 5001u);
  EXPECT_EQ(int8.bytes, 12u + 5004u);
  const QuantizedShardLayout odd = quantized_shard_layout(7, 3, QuantFormat::int4);
  EXPECT_EQ(odd.blocks, 3u);
  EXPECT_EQ(odd.payload_bytes, 2u + 2u + 1u);  // each block's payload starts on a byte
  EXPECT_EQ(odd.block_payload_offset(2), 12u + 4u);
  EXPECT_EQ(odd.bytes, 20u);
  EXPECT_THROW(quantized_shard_layout(10, 0, QuantFormat::int8), Error);
}

// For many shard lengths and block sizes: blocks tile the shard exactly (none reaches past its
// end), their payloads tile the payload, and the packed size is a multiple of 4 at most 3 past it.
TEST(OpsQuantize, BlocksTileEachShardAndNeverStraddleIt) {
  for (QuantFormat format : kFormats)
    for (std::size_t elements : {0, 1, 2, 3, 7, 8, 255, 256, 257, 1000, 2048, 4097, 6143})
      for (std::size_t block : {1, 2, 3, 7, 64, 256, 2048, 5000}) {
        const QuantizedShardLayout layout = quantized_shard_layout(elements, block, format);
        std::size_t next_element = 0, next_byte = layout.payload_offset;
        for (std::size_t b = 0; b < layout.blocks; ++b) {
          EXPECT_EQ(layout.block_begin(b), next_element);
          EXPECT_GE(layout.block_length(b), 1u);
          EXPECT_LE(layout.block_length(b), block);
          EXPECT_EQ(layout.block_payload_offset(b), next_byte);
          EXPECT_EQ(layout.scale_offset(b), 4 * b);
          next_element += layout.block_length(b);
          next_byte += quant_block_bytes(layout.block_length(b), format);
        }
        EXPECT_EQ(next_element, elements) << elements << " / " << block;
        EXPECT_EQ(next_byte, layout.payload_offset + layout.payload_bytes);
        EXPECT_EQ(layout.bytes % 4, 0u);
        EXPECT_LT(layout.bytes - next_byte, 4u);
      }
}

// Shards quantised together are each what they would be alone: changing one shard changes none
// of the others' bytes, and a shard never borrows another's scale.
TEST(OpsQuantize, ShardsQuantisedTogetherAreIndependent) {
  std::mt19937_64 rng(3);
  for (QuantFormat format : kFormats)
    for (std::size_t elements : {1, 5, 300, 1027}) {
      const QuantizedShardLayout layout = quantized_shard_layout(elements, 256, format);
      const std::size_t shards = 5;
      std::vector<float> x = varied_magnitudes(shards * elements, rng);
      const Bytes together = quantized(x, layout, shards);
      for (std::size_t k = 0; k < shards; ++k) {
        const std::vector<float> alone(x.begin() + k * elements, x.begin() + (k + 1) * elements);
        EXPECT_EQ(quantized(alone, layout), Bytes(together.begin() + k * layout.bytes,
                                                  together.begin() + (k + 1) * layout.bytes));
      }
      x[2 * elements] *= 1000.0f;  // the first value of shard 2
      const Bytes changed = quantized(x, layout, shards);
      for (std::size_t byte = 0; byte < together.size(); ++byte)
        if (byte / layout.bytes != 2) {
          EXPECT_EQ(changed[byte], together[byte]) << byte;
        }
      EXPECT_EQ(dequantized(changed, layout, shards).size(), shards * elements);
    }
}

TEST(OpsQuantize, ZeroSizedShardsHaveNoBlocksAndNoBytes) {
  for (QuantFormat format : kFormats) {
    const QuantizedShardLayout layout = quantized_shard_layout(0, 2048, format);
    EXPECT_EQ(layout.blocks, 0u);
    EXPECT_EQ(layout.payload_bytes, 0u);
    EXPECT_EQ(layout.bytes, 0u);
    std::vector<float> none;
    Bytes packed;
    quantize_shards(none.data(), layout, 4, packed.data());
    dequantize_shards(packed.data(), layout, 4, none.data());
    dequantize_add_shards(packed.data(), layout, 4, 3, none.data());
    EXPECT_TRUE(dequantized(quantized(none, layout, 3), layout, 3).empty());
  }
}

// The fused sum over sources adds each in order with one fmaf: the same bits as adding them one
// call at a time.
TEST(OpsQuantize, DequantiseAddSumsSourcesInOrder) {
  std::mt19937_64 rng(4);
  const QuantizedShardLayout layout = quantized_shard_layout(1000, 128, QuantFormat::int4);
  const std::size_t shards = 3, sources = 4;
  const std::vector<float> x = varied_magnitudes(sources * shards * layout.elements, rng);
  const Bytes packed = quantized(x, layout, sources * shards);
  std::vector<float> fused = varied_magnitudes(shards * layout.elements, rng), one_by_one = fused;
  dequantize_add_shards(packed.data(), layout, shards, sources, fused.data());
  for (std::size_t s = 0; s < sources; ++s)
    dequantize_add_shards(packed.data() + s * shards * layout.bytes, layout, shards, 1,
                          one_by_one.data());
  EXPECT_EQ(fused, one_by_one);
  std::vector<float> from_zero(shards * layout.elements, 0.0f);
  dequantize_add_shards(packed.data(), layout, shards, 1, from_zero.data());
  EXPECT_EQ(from_zero, dequantized(packed, layout, shards));  // fma(q, s, 0) = q·s
}

constexpr std::pair<int, int> kGroups[] = {{1, 1}, {1, 4}, {4, 1}, {2, 2}, {2, 3},
                                           {3, 2}, {4, 2}, {8, 2}, {2, 8}, {3, 5}};

TEST(OpsQuantize, QgzSendOrderIsAPermutationWithItsInverse) {
  EXPECT_EQ(qgz_send_order(2, 2), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(qgz_send_order(2, 3), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(qgz_send_positions(2, 3), (std::vector<int>{0, 3, 1, 4, 2, 5}));
  for (const auto& [intra, inter] : kGroups) {
    const std::vector<int> order = qgz_send_order(intra, inter);
    const std::vector<int> positions = qgz_send_positions(intra, inter);
    const int n = intra * inter;
    ASSERT_EQ(order.size(), static_cast<std::size_t>(n));
    EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), order.size());
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(0 <= order[i] && order[i] < n);
      EXPECT_EQ(order[positions[i]], i);
      EXPECT_EQ(positions[order[i]], i);
    }
    // Peer `local`'s part is contiguous: the chunks with that local index, in node order.
    for (int local = 0; local < intra; ++local)
      for (int node = 0; node < inter; ++node)
        EXPECT_EQ(order[local * inter + node], node * intra + local);
  }
  EXPECT_EQ(qgz_average_factor(4), 0.25f);
}

// qgZ's reduce-scatter simulated with n ranks in one process, int4 at both hops, against the
// exact mean; the bound is parallel/zero/qgz_order.h's, from the scales the hops actually used.
TEST(OpsQuantize, QgzTwoHopMeanMatchesTheExactMeanWithinTheBound) {
  std::mt19937_64 rng(5);
  const QuantFormat format = QuantFormat::int4;
  for (const auto& [intra, inter] : kGroups) {
    const int n = intra * inter;
    const QuantizedShardLayout layout = quantized_shard_layout(777, 256, format);
    const std::size_t c = layout.elements, bytes = layout.bytes, un = static_cast<std::size_t>(n);
    std::vector<std::vector<float>> gradients(un);
    for (auto& g : gradients) g = varied_magnitudes(un * c, rng);

    // Hop 1 send buffers: chunks in send order, each quantised as one shard.
    const std::vector<int> order = qgz_send_order(intra, inter);
    std::vector<Bytes> send1(un);
    for (std::size_t r = 0; r < un; ++r) {
      std::vector<float> reordered(un * c);
      for (std::size_t p = 0; p < un; ++p)
        std::copy_n(gradients[r].begin() + static_cast<long>(order[p] * c), c,
                    reordered.begin() + static_cast<long>(p * c));
      send1[r] = quantized(reordered, layout, un);
    }
    // Hop 1 (intra-node all-to-all), sums, re-quantisation of the partials.
    std::vector<Bytes> send2(un);
    std::vector<std::vector<float>> partials(un);
    for (int node = 0; node < inter; ++node)
      for (int local = 0; local < intra; ++local) {
        Bytes received;
        for (int peer = 0; peer < intra; ++peer) {
          const Bytes& from = send1[static_cast<std::size_t>(node * intra + peer)];
          const auto first = from.begin() + static_cast<long>(local * inter * bytes);
          received.insert(received.end(), first, first + static_cast<long>(inter * bytes));
        }
        std::vector<float>& partial = partials[static_cast<std::size_t>(node * intra + local)];
        partial.assign(static_cast<std::size_t>(inter) * c, 0.0f);
        dequantize_add_shards(received.data(), layout, inter, intra, partial.data());
        send2[static_cast<std::size_t>(node * intra + local)] = quantized(partial, layout, inter);
      }
    // Hop 2 (inter-node all-to-all among equal local indices), sums, the mean.
    for (int node = 0; node < inter; ++node)
      for (int local = 0; local < intra; ++local) {
        const int rank = node * intra + local;
        Bytes received;
        for (int peer = 0; peer < inter; ++peer) {
          const Bytes& from = send2[static_cast<std::size_t>(peer * intra + local)];
          const auto first = from.begin() + static_cast<long>(node * bytes);
          received.insert(received.end(), first, first + static_cast<long>(bytes));
        }
        std::vector<float> mean(c, 0.0f);
        dequantize_add_shards(received.data(), layout, 1, inter, mean.data());
        for (float& v : mean) v *= qgz_average_factor(n);

        // The bound: hop-1 steps of every source's block, hop-2 steps of every partial's block,
        // over n, plus fp32 sums (a generous n+2 ulps of the sum of magnitudes).
        const auto chunk = static_cast<std::size_t>(rank) * c;
        double worst = 0;
        for (std::size_t i = 0; i < c; ++i) {
          const std::size_t b = i / layout.block;
          double exact = 0, magnitude = 0, quantisation = 0;
          for (std::size_t r = 0; r < un; ++r) {
            exact += gradients[r][chunk + i];
            magnitude += std::fabs(gradients[r][chunk + i]);
            const auto shard = static_cast<std::size_t>(qgz_send_position(rank, intra, inter));
            quantisation +=
                element_bound(packed_scale(send1[r].data() + shard * bytes, layout, b), format);
          }
          for (int peer = 0; peer < inter; ++peer) {
            const Bytes& from = send2[static_cast<std::size_t>(peer * intra + local)];
            quantisation +=
                element_bound(packed_scale(from.data() + node * bytes, layout, b), format);
          }
          const double slack = (n + 2) * std::ldexp(1.0, -23) * (magnitude + quantisation);
          const double error = std::fabs(mean[i] - exact / n);
          EXPECT_LE(error, (quantisation + slack) / n) << intra << "x" << inter << " rank " << rank;
          worst = std::max(worst, error * n / quantisation);
        }
        EXPECT_GT(worst, 0.05) << "int4 error is visible, the check is not vacuous";
      }
  }
}

}  // namespace
}  // namespace strata::cpu
