// add_into against the host's float additions, bit for bit (one IEEE addition per element), on the
// vector and element-by-element paths and on sizes that are not multiples of the vector width;
// fill writes its value to exactly the elements asked for.
#include <gtest/gtest.h>

#include "model/kernels/cuda/accumulate.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

void check_add_into(std::size_t n, std::size_t offset) {
  auto rng = test_rng();
  const std::vector<float> a = random_floats(n + offset, rng, -1000.0f, 1000.0f);
  const std::vector<float> b = random_floats(n + offset, rng, -1.0f, 1.0f);
  DeviceBuffer<float> sum(a), addend(b);
  add_into(sum.get() + offset, addend.get() + offset, static_cast<long>(n), nullptr);
  const std::vector<float> got = sum.download();
  for (std::size_t i = 0; i < offset; ++i) ASSERT_EQ(got[i], a[i]) << "written before the array";
  for (std::size_t i = offset; i < n + offset; ++i)
    ASSERT_EQ(got[i], a[i] + b[i]) << "element " << i - offset << " of " << n;
}

TEST(CudaAddInto, MatchesHostAdditionVectorised) {
  for (std::size_t n : {1, 7, 8, 1000, 4099, 1 << 20}) check_add_into(n, 0);
}

TEST(CudaAddInto, MatchesHostAdditionUnaligned) {
  for (std::size_t n : {5, 1001, 65537}) check_add_into(n, 3);
}

TEST(CudaFill, WritesTheValueToExactlyItsElements) {
  for (std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{257}, std::size_t{100003}}) {
    const std::vector<float> before(n + 2, -3.0f);
    DeviceBuffer<float> out(before);
    fill(out.get() + 1, 0.125f, static_cast<long>(n), nullptr);
    const std::vector<float> got = out.download();
    ASSERT_EQ(got.front(), -3.0f) << "written before the array";
    ASSERT_EQ(got.back(), -3.0f) << "written past the array";
    for (std::size_t i = 1; i <= n; ++i) ASSERT_EQ(got[i], 0.125f) << "element " << i - 1;
  }
}

}  // namespace
}  // namespace strata::cuda
