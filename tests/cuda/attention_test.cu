// Flash attention against model/kernels/cpu/attention.h (which materialises the (T, T)
// probabilities), on sequence lengths that are and are not multiples of the tile size, with
// multi-head and grouped key/value heads (KV = 1, and groups of 2 and 4: the CPU kernel is itself
// checked against repeated key/value heads in tests/unit/model_attention_test.cpp), plus the
// logsumexp, determinism and a check that no (T, T) buffer is ever allocated. bf16/fp16 run every
// check on both kernel sets (registers, tiles: attention.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cuda/attention.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaAttention : public ::testing::Test {
 protected:
  ~CudaAttention() override { set_attention_kernels(AttentionKernels::registers); }
  DeviceArena arena{64 << 20};
};

// The kernel sets a dtype runs: fp32 has only the tile kernels.
template <class T>
std::vector<AttentionKernels> kernel_sets() {
  if (std::is_same_v<T, float>) return {AttentionKernels::tiles};
  return {AttentionKernels::registers, AttentionKernels::tiles};
}

const char* kernel_set_name(AttentionKernels kernels) {
  return kernels == AttentionKernels::registers ? "registers" : "tiles";
}
TYPED_TEST_SUITE(CudaAttention, ComputeDtypes, DtypeName);

// NH query heads over KV key/value heads of size hs.
struct Shape {
  int B, T, NH, KV, hs;
  int C() const { return NH * hs; }
  int C3() const { return (NH + 2 * KV) * hs; }  // a qkv row
};

// Columns [begin, end) of each row of width `width`.
std::vector<float> columns(const std::vector<float>& rows, int width, int begin, int end) {
  std::vector<float> part;
  for (std::size_t row = 0; row < rows.size() / width; ++row)
    part.insert(part.end(), rows.begin() + row * width + begin, rows.begin() + row * width + end);
  return part;
}

template <class T>
void check_against_cpu(const Shape& s, DeviceArena& arena) {
  auto rng = test_rng();
  const int C = s.C(), C3 = s.C3();
  const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
  // Scores of order 1 (q·k / √hs with entries in ±1.5): peaked enough to exercise the online max.
  const std::vector<float> qkv = rounded<T>(random_floats(rows * C3, rng, -1.5f, 1.5f));
  const std::vector<float> dout = rounded<T>(random_floats(rows * C, rng));
  std::vector<float> out(rows * C), lse(rows * s.NH), scratch, dqkv(rows * C3);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH, s.KV, scratch);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, C,
                          s.NH, s.KV, cpu::ComputeDtype::fp32, scratch);

  DeviceBuffer<T> d_qkv(to_dtype<T>(qkv)), d_dout(to_dtype<T>(dout)), d_out(rows * C),
      d_dqkv(rows * C3);
  DeviceBuffer<float> d_lse(static_cast<std::size_t>(s.B) * s.NH * s.T);
  attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), s.B, s.T, C, s.NH, s.KV, nullptr);
  attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), s.B, s.T, C,
                     s.NH, s.KV, arena, nullptr);
  const std::string where = std::string(kernel_set_name(attention_kernels())) + " B " +
                            std::to_string(s.B) + " T " + std::to_string(s.T) + " NH " +
                            std::to_string(s.NH) + " KV " + std::to_string(s.KV) + " hs " +
                            std::to_string(s.hs);
  EXPECT_LT(relative_error(to_floats(d_out.download()), out), tolerance<T>()) << where;
  // Scores are fp32 sums of exact products of the rounded inputs whatever T is; only the
  // accumulation order differs (tensor-core fragments).
  const double lse_tolerance = std::is_same_v<T, float> ? kFp32Tolerance : 1e-4;
  EXPECT_LT(relative_error(d_lse.download(), lse), lse_tolerance) << where;
  const std::vector<float> got = to_floats(d_dqkv.download());
  EXPECT_LT(relative_error(got, dqkv), tolerance<T>()) << where;
  if (s.KV < s.NH) {  // the group sums alone, where dQ does not dominate the norm
    EXPECT_LT(relative_error(columns(got, C3, C, C3), columns(dqkv, C3, C, C3)), tolerance<T>())
        << where << " dK, dV";
  }
}

TYPED_TEST(CudaAttention, MatchesCpuForAllHeadSizesAndRaggedLengths) {
  using T = TypeParam;
  // Tile rows: 32 (fp32) or 64 (bf16/fp16). T = 1, below one tile, exactly tiles, ragged, and
  // enough tiles that the register kernels' double buffers each refill several times.
  for (AttentionKernels kernels : kernel_sets<T>()) {
    set_attention_kernels(kernels);
    for (int hs : {16, 32, 48, 64, 80, 96, 112, 128})
      for (const Shape s :
           {Shape{1, 1, 1, 1, hs}, Shape{2, 17, 2, 2, hs}, Shape{1, 64, 3, 3, hs},
            Shape{2, 100, 2, 2, hs}, Shape{1, 130, 1, 1, hs}, Shape{1, 333, 2, 2, hs}})
        check_against_cpu<T>(s, this->arena);
  }
}

// Grouped key/value heads on both kernel sets: multi-query (KV = 1), groups of 2 and 4, with one
// tile, ragged tiles and enough tiles that the dK/dV kernels' stream of query tiles runs from one
// query head of the group into the next partway through a double buffer.
TYPED_TEST(CudaAttention, GroupedKeyValueHeadsMatchCpu) {
  using T = TypeParam;
  for (AttentionKernels kernels : kernel_sets<T>()) {
    set_attention_kernels(kernels);
    for (int hs : {16, 32, 48, 64, 80, 96, 112, 128})
      for (const Shape s : {Shape{1, 1, 2, 1, hs}, Shape{2, 17, 4, 1, hs}, Shape{2, 100, 6, 3, hs},
                            Shape{1, 130, 4, 2, hs}, Shape{1, 333, 8, 2, hs}})
        check_against_cpu<T>(s, this->arena);
  }
}

// Also with grouped key/value heads, whose dK and dV each block sums over its group in a fixed
// order.
TYPED_TEST(CudaAttention, BackwardIsDeterministic) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Shape s : {Shape{2, 150, 2, 2, 64}, Shape{2, 150, 4, 1, 64}}) {
    const int C = s.C();
    const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
    DeviceBuffer<T> qkv(to_dtype<T>(random_floats(rows * s.C3(), rng))),
        dout(to_dtype<T>(random_floats(rows * C, rng))), out(rows * C), first(rows * s.C3()),
        second(rows * s.C3());
    DeviceBuffer<float> lse(static_cast<std::size_t>(s.B) * s.NH * s.T);
    for (AttentionKernels kernels : kernel_sets<T>()) {
      set_attention_kernels(kernels);
      attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, C, s.NH, s.KV, nullptr);
      for (T* dqkv : {first.get(), second.get()})
        attention_backward(dqkv, dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, C, s.NH,
                           s.KV, this->arena, nullptr);
      EXPECT_EQ(to_floats(first.download()), to_floats(second.download()))
          << kernel_set_name(kernels) << " KV " << s.KV;
    }
  }
}

// Backward scratch is the B·NH·T row sums and nothing else: at T = 2048 a (T, T) matrix of even
// one head would be 2048² · sizeof(T) bytes, far above what the arena ever held.
TYPED_TEST(CudaAttention, NeverAllocatesTimeSquared) {
  using T = TypeParam;
  const Shape s{1, 2048, 2, 2, 64};
  const int C = s.C();
  const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
  DeviceBuffer<T> qkv(rows * s.C3()), dout(rows * C), out(rows * C), dqkv(rows * s.C3());
  STRATA_CUDA_CHECK(cudaMemset(qkv.get(), 0, qkv.bytes()));
  STRATA_CUDA_CHECK(cudaMemset(dout.get(), 0, dout.bytes()));
  DeviceBuffer<float> lse(static_cast<std::size_t>(s.B) * s.NH * s.T);
  this->arena.reset();
  this->arena.reset_peak();
  attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, C, s.NH, s.KV, nullptr);
  EXPECT_EQ(this->arena.peak(), 0u);
  attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, C, s.NH,
                     s.KV, this->arena, nullptr);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t row_sums = static_cast<std::size_t>(s.B) * s.NH * s.T * sizeof(float);
  EXPECT_LE(this->arena.peak(), row_sums + DeviceArena::kDefaultAlignment);
  EXPECT_LT(this->arena.peak(), static_cast<std::size_t>(s.T) * s.T * sizeof(T));
  EXPECT_EQ(this->arena.used(), 0u);
}

TYPED_TEST(CudaAttention, UnsupportedHeadSizeIsAnError) {
  using T = TypeParam;
  try {
    attention_forward<T>(nullptr, nullptr, nullptr, 1, 4, 80, 2, 2, nullptr);  // head size 40
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size 40"), std::string::npos) << e.what();
  }
}

TYPED_TEST(CudaAttention, HeadsThatDoNotGroupAreAnError) {
  using T = TypeParam;
  try {
    attention_forward<T>(nullptr, nullptr, nullptr, 1, 4, 128, 4, 3, nullptr);  // 4 over 3
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 query heads over 3 key/value heads"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata::cuda
