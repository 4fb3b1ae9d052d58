// Residual + LayerNorm forward and LayerNorm backward against model/kernels/cpu/residual.h and
// layernorm.h, at the caller's eps, with and without biases (y_bias, bias and dbias null: a model
// with model.bias: false). The reference rounds the residual sum to T before normalising, as the
// kernel does.
//
// Tolerances (tests/cuda/cuda_test_support.h): the residual sum is the same rounding of the same
// fp32 sum on both sides, so bitwise equal; out and dinp, stored in T, within tolerance<T>()
// (relative error norm: fp32 1e-5, bf16 1e-2, fp16 5e-3); mean, rstd, dweight and dbias, fp32
// whatever T is, within 1e-5 (only the order of the row and column sums differs from the CPU's).
// A null bias against a zero bias and dweight with against without dbias: bitwise.
#include <gtest/gtest.h>

#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/residual.h"
#include "model/kernels/cuda/layernorm.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaLayerNorm : public ::testing::Test {
 protected:
  DeviceArena arena{16 << 20};
};
TYPED_TEST_SUITE(CudaLayerNorm, ComputeDtypes, DtypeName);

struct Shape {
  int N, C;
  float eps;
};
// C a multiple of every vector width (768), of fp32's only (100, 24), of none (1601); N past a
// whole block of rows and past one column-sum chunk (300); GPT-2's eps, a smaller one and a large
// one that changes every output.
const Shape kShapes[] = {
    {1, 32, 1e-5f}, {37, 100, 1e-6f}, {64, 768, 1e-5f}, {300, 24, 0.1f}, {5, 1601, 1e-5f}};

TYPED_TEST(CudaLayerNorm, FusedResidualForwardMatchesCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> residual = rounded<T>(random_floats(n, rng, -2.0f, 2.0f));
    const std::vector<float> y = rounded<T>(random_floats(n, rng));
    const std::vector<float> y_bias = rounded<T>(random_floats(s.C, rng));
    const std::vector<float> weight = rounded<T>(random_floats(s.C, rng, 0.5f, 1.5f));
    const std::vector<float> bias = rounded<T>(random_floats(s.C, rng));
    DeviceBuffer<T> d_res(to_dtype<T>(residual)), d_y(to_dtype<T>(y)), d_ybias(to_dtype<T>(y_bias)),
        d_w(to_dtype<T>(weight)), d_b(to_dtype<T>(bias));
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << " eps " << s.eps
                                        << (with_bias ? " with" : " without") << " biases");
      std::vector<float> sum(n), want(n), mean(s.N), rstd(s.N);
      cpu::residual_bias_forward(sum.data(), residual.data(), y.data(),
                                 with_bias ? y_bias.data() : nullptr, s.N, s.C);
      sum = rounded<T>(sum);
      cpu::layernorm_forward(want.data(), mean.data(), rstd.data(), sum.data(), weight.data(),
                             with_bias ? bias.data() : nullptr, s.N, s.C, s.eps);

      DeviceBuffer<T> d_sum(n), d_out(n);
      DeviceBuffer<float> d_mean(s.N), d_rstd(s.N);
      residual_layernorm_forward(d_sum.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_res.get(),
                                 d_y.get(), with_bias ? d_ybias.get() : nullptr, d_w.get(),
                                 with_bias ? d_b.get() : nullptr, s.N, s.C, s.eps, nullptr);
      EXPECT_EQ(to_floats(d_sum.download()), sum);
      EXPECT_LT(relative_error(to_floats(d_out.download()), want), tolerance<T>());
      EXPECT_LT(relative_error(d_mean.download(), mean), kFp32Tolerance);
      EXPECT_LT(relative_error(d_rstd.download(), rstd), kFp32Tolerance);

      // Plain LayerNorm of the (rounded) sum gives the same output.
      DeviceBuffer<T> d_plain(n);
      layernorm_forward(d_plain.get(), d_mean.get(), d_rstd.get(), d_sum.get(), d_w.get(),
                        with_bias ? d_b.get() : nullptr, s.N, s.C, s.eps, nullptr);
      EXPECT_EQ(to_floats(d_plain.download()), to_floats(d_out.download()));
    }
  }
}

// A null bias (and y_bias) is a zero one, bit for bit (compared with ==, which takes an output of
// exactly −0 without the bias and its +0 with the zero as equal), in the vectorised and the
// element-wise kernels.
TYPED_TEST(CudaLayerNorm, NullBiasIsAZeroBias) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C);
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    DeviceBuffer<T> d_res(to_dtype<T>(random_floats(n, rng, -2.0f, 2.0f))),
        d_y(to_dtype<T>(random_floats(n, rng))),
        d_w(to_dtype<T>(random_floats(s.C, rng, 0.5f, 1.5f))),
        d_zeros(to_dtype<T>(std::vector<float>(s.C, 0.0f)));
    DeviceBuffer<T> d_sum(n), d_out(n), d_zero_sum(n), d_zero_out(n);
    DeviceBuffer<float> d_mean(s.N), d_rstd(s.N);
    residual_layernorm_forward<T>(d_sum.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_res.get(),
                                  d_y.get(), nullptr, d_w.get(), nullptr, s.N, s.C, s.eps, nullptr);
    residual_layernorm_forward(d_zero_sum.get(), d_zero_out.get(), d_mean.get(), d_rstd.get(),
                               d_res.get(), d_y.get(), d_zeros.get(), d_w.get(), d_zeros.get(), s.N,
                               s.C, s.eps, nullptr);
    EXPECT_EQ(to_floats(d_sum.download()), to_floats(d_zero_sum.download()));
    EXPECT_EQ(to_floats(d_out.download()), to_floats(d_zero_out.download()));
  }
}

TYPED_TEST(CudaLayerNorm, BackwardAccumulatesLikeCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> inp = rounded<T>(random_floats(n, rng, -2.0f, 2.0f));
    const std::vector<float> dout = rounded<T>(random_floats(n, rng));
    const std::vector<float> weight = rounded<T>(random_floats(s.C, rng, 0.5f, 1.5f));
    const std::vector<float> dinp0 = rounded<T>(random_floats(n, rng));
    const std::vector<float> dweight0 = random_floats(s.C, rng), dbias0 = random_floats(s.C, rng);
    std::vector<float> ln(n), mean(s.N), rstd(s.N);
    cpu::layernorm_forward<float>(ln.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                                  nullptr, s.N, s.C, s.eps);
    std::vector<float> dinp = dinp0, dweight = dweight0, dbias = dbias0;
    cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), s.N, s.C);

    DeviceBuffer<T> d_inp(to_dtype<T>(inp)), d_dout(to_dtype<T>(dout)), d_w(to_dtype<T>(weight));
    DeviceBuffer<float> d_mean(mean), d_rstd(rstd);
    std::vector<float> with_dbias_dinp, with_dbias_dweight;
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C << " eps " << s.eps
                                        << (with_bias ? " with" : " without") << " dbias");
      DeviceBuffer<T> d_dinp(to_dtype<T>(dinp0));
      DeviceBuffer<float> d_dw(dweight0), d_db(dbias0);
      layernorm_backward(d_dinp.get(), d_dw.get(), with_bias ? d_db.get() : nullptr, d_dout.get(),
                         d_inp.get(), d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C, this->arena,
                         nullptr);
      const std::vector<float> got_dinp = to_floats(d_dinp.download()), got_dw = d_dw.download();
      EXPECT_LT(relative_error(got_dinp, dinp), tolerance<T>());
      EXPECT_LT(relative_error(got_dw, dweight), kFp32Tolerance);
      if (with_bias) {
        EXPECT_LT(relative_error(d_db.download(), dbias), kFp32Tolerance);
        with_dbias_dinp = got_dinp;
        with_dbias_dweight = got_dw;
      } else {
        EXPECT_EQ(d_db.download(), dbias0);  // untouched: the kernels were given no dbias
        EXPECT_EQ(got_dinp, with_dbias_dinp);
        EXPECT_EQ(got_dw, with_dbias_dweight);
      }
    }
  }
}

}  // namespace
}  // namespace strata::cuda
