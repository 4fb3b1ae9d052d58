// RoPE forward and backward against model/kernels/cpu/rope.h, in place on the same dtype-rounded
// inputs: the turned heads within the relative error norm of cuda_test_support.h (fp32 1e-5: the
// two sides share the double-precision reduced angle and differ by the fp32 sine and cosine, a few
// ulps; bf16 1e-2 and fp16 5e-3: one rounding of each output), every other element unchanged, bit
// for bit. Layouts: the multi-head and grouped-query qkv (16-byte accesses), a span at an odd
// column (element by element), a long-context position offset.
#include <gtest/gtest.h>

#include <vector>

#include "model/kernels/cpu/rope.h"
#include "model/kernels/cuda/rope.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaRope : public ::testing::Test {};
TYPED_TEST_SUITE(CudaRope, ComputeDtypes, DtypeName);

std::vector<RopeLayout> layouts() {
  return {rope_qk_layout(2, 33, 4, 4, 64, 0, 10000.0),         // GPT-2-like qkv (B, T, 3C)
          rope_qk_layout(3, 17, 8, 2, 128, 5, 500000.0),       // grouped-query, Llama 3's theta
          RopeLayout{2, 9, 61, 3, 2, 10, 1, 10000.0},          // odd column and stride: scalar path
          rope_qk_layout(1, 40, 2, 1, 32, 1000000, 10000.0)};  // long context
}

// The elements of the turned heads, in order, and the rest, in order.
struct Split {
  std::vector<float> turned, other;
};
Split split(const std::vector<float>& x, const RopeLayout& l) {
  Split s;
  const long first = l.column, last = l.column + static_cast<long>(l.heads) * l.head_size;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const long c = static_cast<long>(j % l.row_stride);
    (c >= first && c < last ? s.turned : s.other).push_back(x[j]);
  }
  return s;
}

TYPED_TEST(CudaRope, ForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const RopeLayout& l : layouts()) {
    const std::size_t n = static_cast<std::size_t>(l.B) * l.T * l.row_stride;
    const std::vector<float> x = rounded<T>(random_floats(n, rng, -2.0f, 2.0f));
    for (bool backward : {false, true}) {
      std::vector<float> want = x;
      DeviceBuffer<T> data(to_dtype<T>(x));
      if (backward) {
        cpu::rope_backward(want.data(), l);
        rope_backward(data.get(), l, nullptr);
      } else {
        cpu::rope_forward(want.data(), l);
        rope_forward(data.get(), l, nullptr);
      }
      const Split got = split(to_floats(data.download()), l), expected = split(want, l);
      EXPECT_LT(relative_error(got.turned, expected.turned), tolerance<T>())
          << "B " << l.B << " T " << l.T << " heads " << l.heads << " hs " << l.head_size
          << (backward ? " backward" : " forward");
      EXPECT_EQ(got.other, expected.other);
    }
  }
}

// Backward after forward gives the input back, to the dtype's rounding.
TYPED_TEST(CudaRope, BackwardUndoesForward) {
  using T = TypeParam;
  auto rng = test_rng();
  const RopeLayout l = rope_qk_layout(2, 64, 4, 4, 64, 100, 10000.0);
  const std::size_t n = static_cast<std::size_t>(l.B) * l.T * l.row_stride;
  const std::vector<float> x = rounded<T>(random_floats(n, rng));
  DeviceBuffer<T> data(to_dtype<T>(x));
  rope_forward(data.get(), l, nullptr);
  rope_backward(data.get(), l, nullptr);
  EXPECT_LT(relative_error(to_floats(data.download()), x), 2 * tolerance<T>());
}

}  // namespace
}  // namespace strata::cuda
