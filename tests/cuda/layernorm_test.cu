// Residual + LayerNorm forward and LayerNorm backward against model/kernels/cpu/residual.h and
// layernorm.h. The reference rounds the residual sum to T before normalising, as the kernel does.
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
};
const Shape kShapes[] = {{1, 32}, {37, 100}, {64, 768}, {300, 24}, {5, 1601}};

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
    std::vector<float> sum(n), want(n), mean(s.N), rstd(s.N);
    cpu::residual_bias_forward(sum.data(), residual.data(), y.data(), y_bias.data(), s.N, s.C);
    sum = rounded<T>(sum);
    cpu::layernorm_forward(want.data(), mean.data(), rstd.data(), sum.data(), weight.data(),
                           bias.data(), s.N, s.C);

    DeviceBuffer<T> d_res(to_dtype<T>(residual)), d_y(to_dtype<T>(y)), d_ybias(to_dtype<T>(y_bias)),
        d_w(to_dtype<T>(weight)), d_b(to_dtype<T>(bias));
    DeviceBuffer<T> d_sum(n), d_out(n);
    DeviceBuffer<float> d_mean(s.N), d_rstd(s.N);
    residual_layernorm_forward(d_sum.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_res.get(),
                               d_y.get(), d_ybias.get(), d_w.get(), d_b.get(), s.N, s.C, nullptr);
    EXPECT_EQ(to_floats(d_sum.download()), sum) << s.N << "x" << s.C;
    EXPECT_LT(relative_error(to_floats(d_out.download()), want), tolerance<T>())
        << s.N << "x" << s.C;
    EXPECT_LT(relative_error(d_mean.download(), mean), kFp32Tolerance);
    EXPECT_LT(relative_error(d_rstd.download(), rstd), kFp32Tolerance);

    // Plain LayerNorm of the (rounded) sum gives the same output.
    DeviceBuffer<T> d_plain(n);
    layernorm_forward(d_plain.get(), d_mean.get(), d_rstd.get(), d_sum.get(), d_w.get(), d_b.get(),
                      s.N, s.C, nullptr);
    EXPECT_EQ(to_floats(d_plain.download()), to_floats(d_out.download()));
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
    const std::vector<float> bias(s.C, 0.0f);
    const std::vector<float> dinp0 = rounded<T>(random_floats(n, rng));
    const std::vector<float> dweight0 = random_floats(s.C, rng), dbias0 = random_floats(s.C, rng);
    std::vector<float> ln(n), mean(s.N), rstd(s.N);
    cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), s.N, s.C);
    std::vector<float> dinp = dinp0, dweight = dweight0, dbias = dbias0;
    cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), s.N, s.C);

    DeviceBuffer<T> d_inp(to_dtype<T>(inp)), d_dout(to_dtype<T>(dout)), d_w(to_dtype<T>(weight)),
        d_dinp(to_dtype<T>(dinp0));
    DeviceBuffer<float> d_mean(mean), d_rstd(rstd), d_dw(dweight0), d_db(dbias0);
    layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                       d_mean.get(), d_rstd.get(), s.N, s.C, this->arena, nullptr);
    EXPECT_LT(relative_error(to_floats(d_dinp.download()), dinp), tolerance<T>())
        << s.N << "x" << s.C;
    EXPECT_LT(relative_error(d_dw.download(), dweight), kFp32Tolerance) << s.N << "x" << s.C;
    EXPECT_LT(relative_error(d_db.download(), dbias), kFp32Tolerance) << s.N << "x" << s.C;
  }
}

}  // namespace
}  // namespace strata::cuda
