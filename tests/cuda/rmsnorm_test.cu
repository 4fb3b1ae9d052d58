// Residual + RMSNorm forward and RMSNorm backward against model/kernels/cpu/residual.h and
// rmsnorm.h. The reference rounds the residual sum to T before normalising, as the kernel does.
//
// Tolerances (tests/cuda/cuda_test_support.h): the residual sum is the same rounding of the same
// fp32 sum on both sides, so bitwise equal; out and dinp, stored in T, within tolerance<T>()
// (relative error norm: fp32 1e-5, bf16 1e-2, fp16 5e-3); rstd and dweight, fp32 whatever T is,
// within 1e-5 (only the order of the row and column sums differs from the CPU's).
#include <gtest/gtest.h>

#include "model/kernels/cpu/residual.h"
#include "model/kernels/cpu/rmsnorm.h"
#include "model/kernels/cuda/rmsnorm.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaRmsNorm : public ::testing::Test {
 protected:
  DeviceArena arena{16 << 20};
};
TYPED_TEST_SUITE(CudaRmsNorm, ComputeDtypes, DtypeName);

struct Shape {
  int N, C;
  double eps;
};
// C a multiple of every vector width (768, 4096: Llama 7B's d_model), of fp32's only (100, 24),
// of none (1601); N past a whole block of rows and past one column-sum chunk (300).
const Shape kShapes[] = {{1, 32, 1e-5},   {37, 100, 1e-6}, {64, 768, 1e-5},
                         {300, 24, 1e-5}, {5, 1601, 1e-6}, {16, 4096, 1e-5}};

TYPED_TEST(CudaRmsNorm, FusedResidualForwardMatchesCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> residual = rounded<T>(random_floats(n, rng, -2.0f, 2.0f));
    const std::vector<float> y = rounded<T>(random_floats(n, rng));
    const std::vector<float> y_bias = rounded<T>(random_floats(s.C, rng));
    const std::vector<float> weight = rounded<T>(random_floats(s.C, rng, 0.5f, 1.5f));
    DeviceBuffer<T> d_res(to_dtype<T>(residual)), d_y(to_dtype<T>(y)), d_ybias(to_dtype<T>(y_bias)),
        d_w(to_dtype<T>(weight));
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << s.N << "x" << s.C << (with_bias ? " with" : " without") << " bias");
      std::vector<float> sum(n), want(n), rstd(s.N);
      cpu::residual_bias_forward(sum.data(), residual.data(), y.data(),
                                 with_bias ? y_bias.data() : nullptr, s.N, s.C);
      sum = rounded<T>(sum);
      cpu::rmsnorm_forward(want.data(), rstd.data(), sum.data(), weight.data(), s.N, s.C, s.eps);

      DeviceBuffer<T> d_sum(n), d_out(n);
      DeviceBuffer<float> d_rstd(s.N);
      residual_rmsnorm_forward(d_sum.get(), d_out.get(), d_rstd.get(), d_res.get(), d_y.get(),
                               with_bias ? d_ybias.get() : nullptr, d_w.get(), s.N, s.C, s.eps,
                               nullptr);
      EXPECT_EQ(to_floats(d_sum.download()), sum);
      const std::vector<float> out = to_floats(d_out.download());
      EXPECT_LT(relative_error(out, want), tolerance<T>());
      EXPECT_LT(relative_error(d_rstd.download(), rstd), kFp32Tolerance);

      // Plain RMSNorm of the (rounded) sum gives the same output, with or without rstd.
      DeviceBuffer<T> d_plain(n);
      rmsnorm_forward(d_plain.get(), d_rstd.get(), d_sum.get(), d_w.get(), s.N, s.C, s.eps,
                      nullptr);
      EXPECT_EQ(to_floats(d_plain.download()), out);
      rmsnorm_forward(d_plain.get(), static_cast<float*>(nullptr), d_sum.get(), d_w.get(), s.N, s.C,
                      s.eps, nullptr);
      EXPECT_EQ(to_floats(d_plain.download()), out);

      // In place: the residual stream overwritten by the sum.
      DeviceBuffer<T> d_stream(to_dtype<T>(residual));
      residual_rmsnorm_forward(d_stream.get(), d_out.get(), d_rstd.get(), d_stream.get(), d_y.get(),
                               with_bias ? d_ybias.get() : nullptr, d_w.get(), s.N, s.C, s.eps,
                               nullptr);
      EXPECT_EQ(to_floats(d_stream.download()), sum);
      EXPECT_EQ(to_floats(d_out.download()), out);
    }
  }
}

TYPED_TEST(CudaRmsNorm, BackwardAccumulatesLikeCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.C);
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> inp = rounded<T>(random_floats(n, rng, -2.0f, 2.0f));
    const std::vector<float> dout = rounded<T>(random_floats(n, rng));
    const std::vector<float> weight = rounded<T>(random_floats(s.C, rng, 0.5f, 1.5f));
    const std::vector<float> dinp0 = rounded<T>(random_floats(n, rng));
    const std::vector<float> dweight0 = random_floats(s.C, rng);
    std::vector<float> out(n), rstd(s.N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), s.N, s.C, s.eps);
    std::vector<float> dinp = dinp0, dweight = dweight0;
    cpu::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                          rstd.data(), s.N, s.C);

    DeviceBuffer<T> d_inp(to_dtype<T>(inp)), d_dout(to_dtype<T>(dout)), d_w(to_dtype<T>(weight)),
        d_dinp(to_dtype<T>(dinp0));
    DeviceBuffer<float> d_rstd(rstd), d_dw(dweight0);
    rmsnorm_backward(d_dinp.get(), d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(), d_rstd.get(),
                     s.N, s.C, this->arena, nullptr);
    const std::vector<float> got_dinp = to_floats(d_dinp.download());
    const std::vector<float> got_dw = d_dw.download();
    EXPECT_LT(relative_error(got_dinp, dinp), tolerance<T>());
    EXPECT_LT(relative_error(got_dw, dweight), kFp32Tolerance);

    // The split backward, and the weight half run again: the same bits (fixed reduction order).
    DeviceBuffer<T> d_split_dinp(to_dtype<T>(dinp0));
    DeviceBuffer<float> d_split_dw(dweight0);
    rmsnorm_backward_input(d_split_dinp.get(), d_dout.get(), d_inp.get(), d_w.get(), d_rstd.get(),
                           s.N, s.C, nullptr);
    EXPECT_EQ(d_split_dw.download(), dweight0);
    rmsnorm_backward_weight(d_split_dw.get(), d_dout.get(), d_inp.get(), d_rstd.get(), s.N, s.C,
                            this->arena, nullptr);
    EXPECT_EQ(to_floats(d_split_dinp.download()), got_dinp);
    EXPECT_EQ(d_split_dw.download(), got_dw);
    DeviceBuffer<float> d_again_dw(dweight0);
    rmsnorm_backward_weight(d_again_dw.get(), d_dout.get(), d_inp.get(), d_rstd.get(), s.N, s.C,
                            this->arena, nullptr);
    EXPECT_EQ(d_again_dw.download(), got_dw);
  }
}

}  // namespace
}  // namespace strata::cuda
