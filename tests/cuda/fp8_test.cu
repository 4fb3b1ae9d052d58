// FP8 on the device (docs/ARCHITECTURE.md §6 "FP8") against the CPU's emulation: the amaxes of a
// tensor, of each row and of each column, their scales and the codes of every cast (plain and
// transposed), bit for bit against kernels/fp8.h's functions run on the host; and cuBLASLt's FP8
// GEMM (e4m3 × e4m3, and e5m2 gradients × e4m3 as the hybrid format multiplies them) against the
// fp32 sum of the dequantized products, within matmul.h's bound 2^-12 · Σ_k |a_k·b_k| (plus one
// bf16 rounding of the output, 2^-9 relative, where d is bf16), accumulating into fp32 (β = 1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/kernels/cuda/fp8_cast.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/fp8.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

// Values over many binades (so that some fall below each format's normal range once scaled), a
// row and a column of zeros, and one value 2^12 above the rest.
std::vector<float> operand(int rows, int cols, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-20.0f, 4.0f);
  std::vector<float> x(static_cast<std::size_t>(rows) * cols);
  for (float& v : x) v = normal(rng) * std::exp2(exponent(rng));
  for (int c = 0; c < cols; ++c) x[static_cast<std::size_t>(1) * cols + c] = 0.0f;
  for (int r = 0; r < rows; ++r) x[static_cast<std::size_t>(r) * cols + 2] = 0.0f;
  x[static_cast<std::size_t>(3) * cols + 5] = 4096.0f;
  return x;
}

// The host's amaxes and codes, by the functions the kernels call.
std::vector<float> host_amaxes(const std::vector<float>& x, int rows, int cols, Fp8Axis axis) {
  std::vector<float> amax(axis == Fp8Axis::tensor ? 1 : axis == Fp8Axis::rows ? rows : cols, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float& m = amax[axis == Fp8Axis::tensor ? 0 : axis == Fp8Axis::rows ? r : c];
      m = fp8_amax_step(m, x[static_cast<std::size_t>(r) * cols + c]);
    }
  return amax;
}

template <class T>
class CudaFp8Cast : public ::testing::Test {};
using CastTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaFp8Cast, CastTypes, DtypeName);

TYPED_TEST(CudaFp8Cast, AmaxesScalesAndCodesAreTheHostsBitForBit) {
  using T = TypeParam;
  auto rng = test_rng();
  const int rows = 77, cols = 45;
  const std::vector<float> x = rounded<T>(operand(rows, cols, rng));
  DeviceBuffer<T> d_x(to_dtype<T>(x));
  for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (Fp8Axis axis : {Fp8Axis::tensor, Fp8Axis::rows, Fp8Axis::columns}) {
      SCOPED_TRACE(static_cast<int>(axis));
      const std::vector<float> amax = host_amaxes(x, rows, cols, axis);
      DeviceBuffer<float> d_amax(amax.size()), d_scale(amax.size()), d_inverse(amax.size());
      fp8_amaxes(d_amax.get(), d_x.get(), rows, cols, axis, nullptr);
      EXPECT_EQ(d_amax.download(), amax);
      fp8_scales(d_scale.get(), d_inverse.get(), d_amax.get(), static_cast<int>(amax.size()),
                 format, nullptr);
      const std::vector<float> scale = d_scale.download(), inverse = d_inverse.download();
      for (std::size_t i = 0; i < amax.size(); ++i) {
        EXPECT_EQ(scale[i], fp8_scale(amax[i], format)) << i;
        EXPECT_EQ(inverse[i] * scale[i], 1.0f) << i;
      }
      for (const bool transpose : {false, true}) {
        std::vector<std::uint8_t> want(x.size());
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c) {
            const float s = scale[axis == Fp8Axis::tensor ? 0 : axis == Fp8Axis::rows ? r : c];
            want[transpose ? static_cast<std::size_t>(c) * rows + r
                           : static_cast<std::size_t>(r) * cols + c] =
                fp8_quantize(x[static_cast<std::size_t>(r) * cols + c], s, format);
          }
        DeviceBuffer<std::uint8_t> d_codes(x.size());
        fp8_cast(d_codes.get(), d_x.get(), d_scale.get(), rows, cols, axis, transpose, format,
                 nullptr);
        EXPECT_EQ(d_codes.download(), want) << (transpose ? "transposed" : "plain");
      }
    }
}

// Compute capability 8.9 or later: the FP8 tensor cores.
bool has_fp8_tensor_cores() {
  int device = 0, major = 0, minor = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor >= 89;
}

TEST(CudaFp8Matmul, MultipliesTheDequantizedCodesWithinTheAccumulationBound) {
  if (!has_fp8_tensor_cores()) GTEST_SKIP() << "no FP8 tensor cores (compute capability < 8.9)";
  auto rng = test_rng();
  DeviceContext ctx;
  const int rows = 64, cols = 96, K = 256;
  for (const Fp8Format a_format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    SCOPED_TRACE(a_format == Fp8Format::e4m3 ? "e4m3 x e4m3" : "e5m2 x e4m3");
    // Codes of scaled operands, as the casts leave them, and their dequantisation factors.
    const std::vector<float> a = operand(rows, K, rng), b = operand(cols, K, rng);
    const float a_scale = fp8_scale(host_amaxes(a, rows, K, Fp8Axis::tensor)[0], a_format);
    const float b_scale = fp8_scale(host_amaxes(b, cols, K, Fp8Axis::tensor)[0], Fp8Format::e4m3);
    std::vector<std::uint8_t> a_codes(a.size()), b_codes(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) a_codes[i] = fp8_quantize(a[i], a_scale, a_format);
    for (std::size_t i = 0; i < b.size(); ++i)
      b_codes[i] = fp8_quantize(b[i], b_scale, Fp8Format::e4m3);
    // The emulation's product: the fp32 sum of the dequantized values (here in double), and the
    // bound's Σ |a·b|.
    std::vector<double> want(static_cast<std::size_t>(rows) * cols), scale(want.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        for (int k = 0; k < K; ++k) {
          const double p =
              static_cast<double>(fp8_dequantize(a_codes[r * K + k], a_scale, a_format)) *
              fp8_dequantize(b_codes[c * K + k], b_scale, Fp8Format::e4m3);
          want[static_cast<std::size_t>(r) * cols + c] += p;
          scale[static_cast<std::size_t>(r) * cols + c] += std::fabs(p);
        }
    DeviceBuffer<std::uint8_t> d_a(a_codes), d_b(b_codes);
    DeviceBuffer<float> d_a_inverse(std::vector<float>{1.0f / a_scale}),
        d_b_inverse(std::vector<float>{1.0f / b_scale});
    // bf16 output, then fp32 added onto 1.0 (a weight gradient's accumulation).
    DeviceBuffer<__nv_bfloat16> d_bf16(want.size());
    fp8_matmul(ctx, d_bf16.get(), d_a.get(), a_format, d_a_inverse.get(), d_b.get(),
               Fp8Format::e4m3, d_b_inverse.get(), rows, cols, K, 0.0f);
    DeviceBuffer<float> d_fp32(std::vector<float>(want.size(), 1.0f));
    fp8_matmul(ctx, d_fp32.get(), d_a.get(), a_format, d_a_inverse.get(), d_b.get(),
               Fp8Format::e4m3, d_b_inverse.get(), rows, cols, K, 1.0f);
    const std::vector<float> bf16 = to_floats(d_bf16.download()), fp32 = d_fp32.download();
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double bound = std::ldexp(scale[i], -12);
      EXPECT_LE(std::fabs(fp32[i] - 1.0 - want[i]),
                bound + std::ldexp(1.0 + std::fabs(want[i]), -23))
          << i;
      EXPECT_LE(std::fabs(bf16[i] - want[i]), bound + std::ldexp(std::fabs(want[i]), -8)) << i;
    }
  }
}

}  // namespace
}  // namespace strata::cuda
