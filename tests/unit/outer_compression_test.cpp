// Compression of DiLoCo's outer gradients (parallel/diloco/outer_compression.h): each format's
// round trip against its stated bound (bf16 and fp16 bitwise the rounding of
// model/kernels/cpu/precision.h, fp16's subnormals and overflow included; int8/int4 within half a
// block scale, zeros exact), the byte counts, and error feedback: the sum of what was sent tracks
// the sum of the true outer gradients (the residual stays within one step) where plain compression
// loses small values every round.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/precision.h"
#include "model/kernels/quantize_block.h"
#include "parallel/diloco/outer_compression.h"
#include "parallel/zero/segment_collectives.h"

namespace strata {
namespace {

std::vector<float> round_trip(const std::vector<float>& x, OuterCompression format) {
  std::vector<std::uint8_t> bytes(compressed_bytes(x.size(), format));
  compress(x.data(), x.size(), format, bytes.data());
  std::vector<float> back(x.size(), 0.0f);
  decompress_add(bytes.data(), x.size(), format, back.data());
  return back;
}

std::vector<float> sample(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] =
        static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * std::exp(-double(i % 97) / 9));
  x[3] = 0.0f;
  return x;
}

TEST(OuterCompression, NoneIsExactAndSixteenBitFormatsRoundLikeThePrecisionEmulation) {
  std::vector<float> x = sample(5000);
  // fp16's edges: a subnormal, the largest finite, overflow, a negative.
  x.insert(x.end(), {3e-7f, 6.1e-5f, 65504.0f, 70000.0f, -1.5e-3f, 0.0f, -0.0f});
  EXPECT_EQ(round_trip(x, OuterCompression::none), x);
  const std::vector<float> bf16 = round_trip(x, OuterCompression::bf16);
  const std::vector<float> fp16 = round_trip(x, OuterCompression::fp16);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bf16[i], cpu::round_to_bf16(x[i])) << i;
    EXPECT_EQ(fp16[i], cpu::round_to_fp16(x[i])) << i << " " << x[i];
  }
  EXPECT_TRUE(std::isinf(fp16[fp16.size() - 4]));  // 70000 overflows fp16
  EXPECT_EQ(compressed_bytes(10, OuterCompression::none), 40u);
  EXPECT_EQ(compressed_bytes(10, OuterCompression::bf16), 20u);
  EXPECT_EQ(compressed_bytes(10, OuterCompression::fp16), 20u);
}

TEST(OuterCompression, BlockFormatsStayWithinHalfAScale) {
  const std::vector<float> x = sample(5000);
  for (OuterCompression format : {OuterCompression::int8, OuterCompression::int4}) {
    const bool int8 = format == OuterCompression::int8;
    const std::size_t block = int8 ? kWeightQuantBlock : kGradientQuantBlock;
    const QuantFormat q = int8 ? QuantFormat::int8 : QuantFormat::int4;
    const std::vector<float> back = round_trip(x, format);
    for (std::size_t b = 0; b * block < x.size(); ++b) {
      float absmax = 0;
      const std::size_t end = std::min(x.size(), (b + 1) * block);
      for (std::size_t i = b * block; i < end; ++i) absmax = std::max(absmax, std::fabs(x[i]));
      const double scale = quant_scale(absmax, q);
      for (std::size_t i = b * block; i < end; ++i)
        ASSERT_LE(std::fabs(back[i] - x[i]), scale / 2 + quant_max(q) * 0x1p-22 * scale) << i;
    }
    EXPECT_EQ(back[3], 0.0f);
    EXPECT_EQ(compressed_bytes(x.size(), format), quantized_shard_layout(x.size(), block, q).bytes);
  }
  EXPECT_THROW(outer_compression_from_name("int2"), Error);
}

TEST(OuterCompression, ErrorFeedbackTracksTheSumOfTheTrueOuterGradients) {
  // One int4 block: a large value and small ones below half a step (7 levels of 1.0/7): sent
  // plainly, the small ones are 0 every round; with feedback their sum arrives.
  const std::size_t n = 512;
  std::vector<float> g(n, 0.03f);
  g[0] = 1.0f;
  const std::vector<std::uint8_t>::size_type bytes = compressed_bytes(n, OuterCompression::int4);
  ErrorFeedback feedback(n);
  std::vector<double> truth(n, 0.0), sent_plain(n, 0.0), sent_feedback(n, 0.0);
  std::vector<std::uint8_t> packed(bytes);
  for (int round = 0; round < 40; ++round) {
    std::vector<float> plain(n, 0.0f), corrected(n, 0.0f);
    compress(g.data(), n, OuterCompression::int4, packed.data());
    decompress_add(packed.data(), n, OuterCompression::int4, plain.data());
    feedback.compress(g.data(), OuterCompression::int4, packed.data());
    decompress_add(packed.data(), n, OuterCompression::int4, corrected.data());
    for (std::size_t i = 0; i < n; ++i) {
      truth[i] += g[i];
      sent_plain[i] += plain[i];
      sent_feedback[i] += corrected[i];
    }
    // The invariant: what was sent plus the residual is what should have been sent.
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(sent_feedback[i] + feedback.residual()[i], truth[i], 1e-4) << round;
  }
  const double step = 1.0 / 7;  // the int4 step of a block whose absmax is about 1
  for (std::size_t i = 1; i < n; ++i) {
    EXPECT_EQ(sent_plain[i], 0.0) << "plain int4 should lose the small values";
    EXPECT_LE(std::fabs(feedback.residual()[i]), step) << "residual beyond one step";
    EXPECT_NEAR(sent_feedback[i], truth[i], step);
  }
}

}  // namespace
}  // namespace strata
