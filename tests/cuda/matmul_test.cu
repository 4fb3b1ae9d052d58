// cuBLASLt linear layers against model/kernels/cpu/matmul.h (and cpu/gelu.h for the fused GELU
// epilogues), including shapes whose GELU dimension is not a multiple of 8 (the unfused fallback).
#include <gtest/gtest.h>

#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/matmul_plans.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaMatmul : public ::testing::Test {
 protected:
  DeviceContext ctx;
  DeviceArena arena{16 << 20};
};
TYPED_TEST_SUITE(CudaMatmul, ComputeDtypes, DtypeName);

struct Shape {
  int N, IC, OC;
};
const Shape kShapes[] = {{1, 16, 8}, {37, 64, 72}, {128, 96, 200}, {50, 40, 20}, {300, 24, 36}};

TYPED_TEST(CudaMatmul, ForwardWithAndWithoutBiasAndGelu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t out_size = static_cast<std::size_t>(s.N) * s.OC;
    const std::vector<float> inp =
        rounded<T>(random_floats(static_cast<std::size_t>(s.N) * s.IC, rng));
    const std::vector<float> weight =
        rounded<T>(random_floats(static_cast<std::size_t>(s.OC) * s.IC, rng, -0.3f, 0.3f));
    const std::vector<float> bias = rounded<T>(random_floats(s.OC, rng));
    std::vector<float> want(out_size), want_no_bias(out_size), want_gelu(out_size);
    cpu::matmul_forward(want.data(), inp.data(), weight.data(), bias.data(), s.N, s.IC, s.OC);
    cpu::matmul_forward(want_no_bias.data(), inp.data(), weight.data(),
                        static_cast<const float*>(nullptr), s.N, s.IC, s.OC);
    cpu::gelu_forward(want_gelu.data(), want.data(), static_cast<long>(out_size));

    DeviceBuffer<T> d_inp(to_dtype<T>(inp)), d_w(to_dtype<T>(weight)), d_b(to_dtype<T>(bias));
    DeviceBuffer<T> out(out_size), pre(out_size);
    matmul_forward<T>(this->ctx, out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(), s.N, s.IC,
                      s.OC);
    EXPECT_LT(relative_error(to_floats(out.download()), want), tolerance<T>()) << s.N;
    matmul_forward<T>(this->ctx, out.get(), nullptr, d_inp.get(), d_w.get(), nullptr, s.N, s.IC,
                      s.OC);
    EXPECT_LT(relative_error(to_floats(out.download()), want_no_bias), tolerance<T>()) << s.N;
    matmul_forward<T>(this->ctx, out.get(), pre.get(), d_inp.get(), d_w.get(), d_b.get(), s.N, s.IC,
                      s.OC);
    EXPECT_LT(relative_error(to_floats(pre.download()), want), tolerance<T>()) << s.N;
    EXPECT_LT(relative_error(to_floats(out.download()), want_gelu), tolerance<T>()) << s.N;
  }
}

TYPED_TEST(CudaMatmul, InputGradientWithAndWithoutGelu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::size_t inp_size = static_cast<std::size_t>(s.N) * s.IC;
    const std::vector<float> dout =
        rounded<T>(random_floats(static_cast<std::size_t>(s.N) * s.OC, rng));
    const std::vector<float> weight =
        rounded<T>(random_floats(static_cast<std::size_t>(s.OC) * s.IC, rng, -0.3f, 0.3f));
    const std::vector<float> pre = rounded<T>(random_floats(inp_size, rng, -3.0f, 3.0f));
    const std::vector<float> inp(inp_size, 0.0f);
    std::vector<float> want(inp_size), want_gelu(inp_size);
    std::vector<float> unused_dweight(weight.size(), 0.0f);
    cpu::matmul_backward(want.data(), unused_dweight.data(), static_cast<float*>(nullptr),
                         dout.data(), inp.data(), weight.data(), s.N, s.IC, s.OC);
    cpu::gelu_backward(want_gelu.data(), pre.data(), want.data(), static_cast<long>(inp_size));

    DeviceBuffer<T> d_dout(to_dtype<T>(dout)), d_w(to_dtype<T>(weight)), d_pre(to_dtype<T>(pre));
    DeviceBuffer<T> dinp(inp_size);
    matmul_backward_input<T>(this->ctx, dinp.get(), d_dout.get(), d_w.get(), nullptr, s.N, s.IC,
                             s.OC);
    EXPECT_LT(relative_error(to_floats(dinp.download()), want), tolerance<T>()) << s.N;
    matmul_backward_input<T>(this->ctx, dinp.get(), d_dout.get(), d_w.get(), d_pre.get(), s.N, s.IC,
                             s.OC);
    EXPECT_LT(relative_error(to_floats(dinp.download()), want_gelu), tolerance<T>()) << s.N;
  }
}

TYPED_TEST(CudaMatmul, WeightAndBiasGradientsAccumulate) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : kShapes) {
    const std::vector<float> dout =
        rounded<T>(random_floats(static_cast<std::size_t>(s.N) * s.OC, rng));
    const std::vector<float> inp =
        rounded<T>(random_floats(static_cast<std::size_t>(s.N) * s.IC, rng));
    const std::vector<float> weight(static_cast<std::size_t>(s.OC) * s.IC, 0.0f);
    const std::vector<float> dweight0 = random_floats(weight.size(), rng);
    const std::vector<float> dbias0 = random_floats(s.OC, rng);
    std::vector<float> dweight = dweight0, dbias = dbias0;
    cpu::matmul_backward(static_cast<float*>(nullptr), dweight.data(), dbias.data(), dout.data(),
                         inp.data(), weight.data(), s.N, s.IC, s.OC);

    DeviceBuffer<T> d_dout(to_dtype<T>(dout)), d_inp(to_dtype<T>(inp));
    DeviceBuffer<float> d_dw(dweight0), d_db(dbias0);
    matmul_backward_weight<T>(this->ctx, d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), s.N,
                              s.IC, s.OC, this->arena);
    // fp32 outputs accumulated in fp32 from exactly representable inputs.
    EXPECT_LT(relative_error(d_dw.download(), dweight), kFp32Tolerance) << s.N;
    EXPECT_LT(relative_error(d_db.download(), dbias), kFp32Tolerance) << s.N;
    EXPECT_EQ(this->arena.used(), 0u);
  }
}

TYPED_TEST(CudaMatmul, PlansAreCachedPerShape) {
  using T = TypeParam;
  const Shape s{64, 32, 48};
  DeviceBuffer<T> inp(static_cast<std::size_t>(s.N) * s.IC),
      w(static_cast<std::size_t>(s.OC) * s.IC), out(static_cast<std::size_t>(s.N) * s.OC);
  matmul_forward<T>(this->ctx, out.get(), nullptr, inp.get(), w.get(), nullptr, s.N, s.IC, s.OC);
  const std::size_t plans = this->ctx.matmul_plans().size();
  for (int i = 0; i < 3; ++i)
    matmul_forward<T>(this->ctx, out.get(), nullptr, inp.get(), w.get(), nullptr, s.N, s.IC, s.OC);
  EXPECT_EQ(this->ctx.matmul_plans().size(), plans);
  matmul_forward<T>(this->ctx, out.get(), nullptr, inp.get(), w.get(), nullptr, s.N / 2, s.IC,
                    s.OC);
  EXPECT_EQ(this->ctx.matmul_plans().size(), plans + 1);
}

}  // namespace
}  // namespace strata::cuda
