// FP8 on the device (docs/ARCHITECTURE.md §6 "FP8") against the CPU's emulation: the amaxes of a
// tensor, of each row and of each column, their scales and the codes of every cast (plain and
// transposed, and those the norm and GELU kernels fuse into their writes), bit for bit against
// kernels/fp8.h's functions run on the host; and cuBLASLt's FP8
// GEMM (e4m3 × e4m3, and e5m2 gradients × e4m3 as the hybrid format multiplies them; scales per
// tensor and per row) against the fp32 sum of the dequantized products, within matmul.h's bound
// 2^-12 · Σ_k |a_k·b_k| (plus the bf16 rounding of the output and its bias where d is bf16),
// accumulating into fp32 (β = 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/kernels/cuda/fp8_cast.h"
#include "model/kernels/cuda/gelu.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/rmsnorm.h"
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

// A kernel that casts what it writes (fp8_cast.h Fp8CastOutput, the delayed recipe's fused casts)
// writes the same output as without the cast, and the codes and amax fp8_cast and fp8_amaxes make
// of that output (an amax it starts from above them stays): `write(cast)` runs the kernel into
// `out` (n values). A scale from a quarter of the amax saturates some values.
template <class T>
void expect_the_cast_of_the_output(const std::function<void(const Fp8CastOutput&)>& write,
                                   const DeviceBuffer<T>& out, int rows, int cols) {
  const long n = static_cast<long>(rows) * cols;
  write({});
  const std::vector<T> want = out.download();
  const std::vector<float> values = to_floats(want);
  const float amax = host_amaxes(values, rows, cols, Fp8Axis::tensor)[0];
  for (const Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (const float start : {0.0f, 2.0f * amax}) {
      const float scale = fp8_scale(amax / 4, format);
      DeviceBuffer<float> d_scale(std::vector<float>{scale}), d_amax(std::vector<float>{start});
      DeviceBuffer<std::uint8_t> d_codes(static_cast<std::size_t>(n));
      write({d_codes.get(), d_scale.get(), d_amax.get(), format});
      const std::vector<T> got = out.download();
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(T)));
      std::vector<std::uint8_t> codes(values.size());
      for (std::size_t i = 0; i < values.size(); ++i)
        codes[i] = fp8_quantize(values[i], scale, format);
      EXPECT_EQ(d_codes.download(), codes);
      EXPECT_EQ(d_amax.download()[0], std::max(start, amax));
    }
}

// GELU (mlp_proj's input) and the norms (qkv's and mlp_fc's), with and without their residual
// add, over C = 256 (the vectorised rows) and 45 (element by element).
TYPED_TEST(CudaFp8Cast, KernelsThatCastWhatTheyWriteCastItAsStored) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const int cols : {256, 45}) {
    SCOPED_TRACE(cols);
    const int rows = 77;
    const long n = static_cast<long>(rows) * cols;
    std::vector<float> x = rounded<T>(operand(rows, cols, rng));
    for (float& v : x) v = std::ldexp(v, 10);  // GELU's inputs over ±2^14: both of its tails
    const std::vector<float> y = rounded<T>(random_floats(x.size(), rng));
    const std::vector<float> w = rounded<T>(random_floats(static_cast<std::size_t>(cols), rng));
    DeviceBuffer<T> d_x(to_dtype<T>(x)), d_y(to_dtype<T>(y)), d_w(to_dtype<T>(w)), d_out(x.size()),
        d_sum(x.size());
    DeviceBuffer<float> d_mean(static_cast<std::size_t>(rows)),
        d_rstd(static_cast<std::size_t>(rows));
    {
      SCOPED_TRACE("gelu");
      expect_the_cast_of_the_output<T>(
          [&](const Fp8CastOutput& cast) {
            if (cast.codes == nullptr)
              gelu_forward(d_out.get(), d_x.get(), n, nullptr);
            else
              gelu_forward_fp8(d_out.get(), d_x.get(), n, cast, nullptr);
          },
          d_out, rows, cols);
    }
    for (const bool residual : {false, true}) {
      SCOPED_TRACE(residual ? "residual add and norm" : "norm");
      const T* y_in = residual ? d_y.get() : nullptr;
      T* sum = residual ? d_sum.get() : nullptr;
      expect_the_cast_of_the_output<T>(
          [&](const Fp8CastOutput& cast) {
            residual_layernorm_forward<T>(sum, d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(),
                                          y_in, nullptr, d_w.get(), d_w.get(), rows, cols, 1e-5,
                                          nullptr, cast);
          },
          d_out, rows, cols);
      expect_the_cast_of_the_output<T>(
          [&](const Fp8CastOutput& cast) {
            residual_rmsnorm_forward<T>(sum, d_out.get(), d_rstd.get(), d_x.get(), y_in, nullptr,
                                        d_w.get(), rows, cols, 1e-5, nullptr, cast);
          },
          d_out, rows, cols);
    }
  }
}

// The device's compute capability, as major·10 + minor: FP8 tensor cores from 89 (Ada), per-row
// scales from 90 (Hopper).
int compute_capability() {
  int device = 0, major = 0, minor = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

// Per tensor (tensorwise, delayed) and per row of each operand (rowwise's outer-vector scales);
// bf16 output with a bias (the epilogue, or the kernel after the GEMM where cuBLASLt has none for
// the scales), then fp32 added onto 1.0 (a weight gradient's accumulation).
TEST(CudaFp8Matmul, MultipliesTheDequantizedCodesWithinTheAccumulationBound) {
  const int capability = compute_capability();
  if (capability < 89) GTEST_SKIP() << "no FP8 tensor cores (compute capability < 8.9)";
  auto rng = test_rng();
  DeviceContext ctx;
  const int rows = 64, cols = 96, K = 256;
  // Per-row scales: Hopper (9.0) and cuBLAS 12.9 on, as make_cuda_training requires for rowwise.
  std::vector<Fp8Scales> shapes{Fp8Scales::tensor};
  if (capability >= 90 && fp8_row_scales_available())
    shapes.push_back(Fp8Scales::rows);
  else
    std::printf("note: per-row scales untested here (compute capability %d.%d or cuBLAS < 12.9)\n",
                capability / 10, capability % 10);
  for (const Fp8Scales scales : shapes)
    for (const Fp8Format a_format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      SCOPED_TRACE(std::string(a_format == Fp8Format::e4m3 ? "e4m3 x e4m3" : "e5m2 x e4m3") +
                   (scales == Fp8Scales::rows ? ", per-row scales" : ", tensor scales"));
      const Fp8Axis axis = scales == Fp8Scales::rows ? Fp8Axis::rows : Fp8Axis::tensor;
      // Codes of scaled operands, as the casts leave them, and their dequantisation factors.
      const std::vector<float> a = operand(rows, K, rng), b = operand(cols, K, rng);
      std::vector<float> a_scale = host_amaxes(a, rows, K, axis),
                         b_scale = host_amaxes(b, cols, K, axis);
      for (float& s : a_scale) s = fp8_scale(s, a_format);
      for (float& s : b_scale) s = fp8_scale(s, Fp8Format::e4m3);
      auto scale_of = [&](const std::vector<float>& scale, int row) {
        return scale[axis == Fp8Axis::tensor ? 0 : static_cast<std::size_t>(row)];
      };
      std::vector<std::uint8_t> a_codes(a.size()), b_codes(b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        a_codes[i] = fp8_quantize(a[i], scale_of(a_scale, static_cast<int>(i / K)), a_format);
      for (std::size_t i = 0; i < b.size(); ++i)
        b_codes[i] =
            fp8_quantize(b[i], scale_of(b_scale, static_cast<int>(i / K)), Fp8Format::e4m3);
      // The emulation's product: the fp32 sum of the dequantized values (here in double), and the
      // bound's Σ |a·b|.
      std::vector<double> want(static_cast<std::size_t>(rows) * cols), scale(want.size());
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
          for (int k = 0; k < K; ++k) {
            const double p =
                static_cast<double>(
                    fp8_dequantize(a_codes[r * K + k], scale_of(a_scale, r), a_format)) *
                fp8_dequantize(b_codes[c * K + k], scale_of(b_scale, c), Fp8Format::e4m3);
            want[static_cast<std::size_t>(r) * cols + c] += p;
            scale[static_cast<std::size_t>(r) * cols + c] += std::fabs(p);
          }
      std::vector<float> a_inverse(a_scale.size()), b_inverse(b_scale.size());
      for (std::size_t i = 0; i < a_scale.size(); ++i) a_inverse[i] = 1.0f / a_scale[i];
      for (std::size_t i = 0; i < b_scale.size(); ++i) b_inverse[i] = 1.0f / b_scale[i];
      std::vector<float> bias(static_cast<std::size_t>(cols));
      for (int c = 0; c < cols; ++c) bias[static_cast<std::size_t>(c)] = 0.25f * (c % 7) - 0.75f;
      DeviceBuffer<std::uint8_t> d_a(a_codes), d_b(b_codes);
      DeviceBuffer<float> d_a_inverse(a_inverse), d_b_inverse(b_inverse);
      DeviceBuffer<__nv_bfloat16> d_bias(to_dtype<__nv_bfloat16>(bias)), d_bf16(want.size());
      fp8_matmul(ctx, d_bf16.get(), d_a.get(), a_format, d_a_inverse.get(), d_b.get(),
                 Fp8Format::e4m3, d_b_inverse.get(), rows, cols, K, 0.0f, d_bias.get(), scales);
      DeviceBuffer<float> d_fp32(std::vector<float>(want.size(), 1.0f));
      fp8_matmul(ctx, d_fp32.get(), d_a.get(), a_format, d_a_inverse.get(), d_b.get(),
                 Fp8Format::e4m3, d_b_inverse.get(), rows, cols, K, 1.0f, nullptr, scales);
      const std::vector<float> bf16 = to_floats(d_bf16.download()), fp32 = d_fp32.download();
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double bound = std::ldexp(scale[i], -12);
        EXPECT_LE(std::fabs(fp32[i] - 1.0 - want[i]),
                  bound + std::ldexp(1.0 + std::fabs(want[i]), -23))
            << i;
        // bf16 of the product plus the bias: two roundings where the bias is added after the GEMM.
        const double with_bias = want[i] + bias[i % static_cast<std::size_t>(cols)];
        EXPECT_LE(std::fabs(bf16[i] - with_bias),
                  bound + std::ldexp(std::fabs(want[i]) + 2.0 * std::fabs(with_bias), -8))
            << i;
      }
    }
}

}  // namespace
}  // namespace strata::cuda
