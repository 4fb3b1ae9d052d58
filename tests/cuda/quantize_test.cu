// The block quantisers against their CPU reference (model/kernels/cpu/quantize.h), bit for bit:
// the packed bytes (scales, payload, padding) and the dequantised and dequantise-added floats, on
// random values of many magnitudes, odd lengths and block sizes, several shards and sources, the
// adversarial values of tests/support/quantize_inputs.h, and zero-sized shards.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/kernels/cpu/quantize.h"
#include "model/kernels/cuda/quantize.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/support/quantize_inputs.h"

namespace strata::cuda {
namespace {

using namespace testing;
using Bytes = std::vector<std::uint8_t>;

// Floats as bit patterns: EXPECT_EQ on floats would take −0 for +0.
std::vector<std::uint32_t> bits(const std::vector<float>& x) {
  std::vector<std::uint32_t> out(x.size());
  if (!x.empty()) std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
  return out;
}

struct Case {
  QuantFormat format;
  std::size_t elements, block, shards;
};

class CudaQuantize : public ::testing::TestWithParam<Case> {};

TEST_P(CudaQuantize, MatchesTheCpuReferenceBitForBit) {
  const Case c = GetParam();
  auto rng = test_rng();
  const QuantizedShardLayout layout = quantized_shard_layout(c.elements, c.block, c.format);
  const std::size_t sources = 3, n = c.shards * c.elements;
  const std::vector<float> x = strata::testing::quantizer_inputs(sources * n, rng);

  // Quantise all sources' shards at once: (sources · shards) shards.
  Bytes want_packed(sources * c.shards * layout.bytes);
  cpu::quantize_shards(x.data(), layout, sources * c.shards, want_packed.data());
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<std::uint8_t> d_packed(want_packed.size());
  quantize_shards(d_x.get(), layout, sources * c.shards, d_packed.get(), nullptr);
  EXPECT_EQ(d_packed.download(), want_packed);

  std::vector<float> want_x(sources * n);
  cpu::dequantize_shards(want_packed.data(), layout, sources * c.shards, want_x.data());
  DeviceBuffer<float> d_back(sources * n);
  dequantize_shards(d_packed.get(), layout, sources * c.shards, d_back.get(), nullptr);
  EXPECT_EQ(bits(d_back.download()), bits(want_x));

  // The sum over sources into a random fp32 buffer, as after a qgZ hop.
  std::vector<float> want_sum = random_floats(n, rng);
  DeviceBuffer<float> d_sum(want_sum);
  cpu::dequantize_add_shards(want_packed.data(), layout, c.shards, sources, want_sum.data());
  dequantize_add_shards(d_packed.get(), layout, c.shards, sources, d_sum.get(), nullptr);
  EXPECT_EQ(bits(d_sum.download()), bits(want_sum));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaQuantize,
    ::testing::Values(Case{QuantFormat::int8, 100000, 2048, 2},
                      Case{QuantFormat::int4, 100000, 2048, 2},
                      Case{QuantFormat::int8, 4097, 256, 5}, Case{QuantFormat::int4, 4097, 256, 5},
                      Case{QuantFormat::int4, 777, 3, 4}, Case{QuantFormat::int8, 777, 3000, 4},
                      Case{QuantFormat::int4, 1, 2048, 7}, Case{QuantFormat::int4, 0, 2048, 3}));

TEST(CudaQuantizeNonFinite, NonFiniteValuesMakeTheirWholeBlockNonFiniteOnTheDeviceToo) {
  for (QuantFormat format : {QuantFormat::int8, QuantFormat::int4})
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x(3000, 0.5f);
      x[1500] = bad;
      const QuantizedShardLayout layout = quantized_shard_layout(x.size(), 1024, format);
      DeviceBuffer<float> d_x(x), d_back(x.size());
      DeviceBuffer<std::uint8_t> d_packed(layout.bytes);
      quantize_shards(d_x.get(), layout, 1, d_packed.get(), nullptr);
      dequantize_shards(d_packed.get(), layout, 1, d_back.get(), nullptr);
      const std::vector<float> back = d_back.download();
      for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(std::isfinite(back[i]), i < 1024 || i >= 2048) << bad << " element " << i;
    }
}

}  // namespace
}  // namespace strata::cuda
