// Vocabulary-parallel token embedding and position embedding against
// model/kernels/cpu/vocab_parallel.h. Gradients are fp32 sums of exactly representable values, so
// they are held to the fp32 bound for every dtype.
#include <gtest/gtest.h>

#include "model/kernels/cpu/vocab_parallel.h"
#include "model/kernels/cuda/embedding.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaEmbedding : public ::testing::Test {
 protected:
  DeviceArena arena{16 << 20};
};
TYPED_TEST_SUITE(CudaEmbedding, ComputeDtypes, DtypeName);

struct Case {
  int vocab_begin, Vl, V, N, C;
};
// A middle shard, the whole vocabulary, few tokens repeated many times, channels that are not a
// multiple of the vector width.
const Case kCases[] = {
    {16, 16, 50, 37, 8}, {0, 64, 60, 200, 100}, {3, 5, 9, 1000, 24}, {128, 128, 300, 77, 13}};

std::vector<std::int32_t> random_tokens(int N, int V, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::vector<std::int32_t> tokens(N);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

TYPED_TEST(CudaEmbedding, ShardForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  for (const Case c : kCases) {
    const std::vector<std::int32_t> tokens = random_tokens(c.N, c.V, rng);
    const std::size_t rows = static_cast<std::size_t>(c.N) * c.C;
    const std::vector<float> wte =
        rounded<T>(random_floats(static_cast<std::size_t>(c.Vl) * c.C, rng));
    const std::vector<float> dout = rounded<T>(random_floats(rows, rng));
    const std::vector<float> dwte0 = random_floats(wte.size(), rng);
    std::vector<float> want(rows), dwte = dwte0;
    cpu::embedding_shard_forward(want.data(), tokens.data(), wte.data(), c.vocab_begin, c.Vl, c.N,
                                 c.C);
    cpu::embedding_shard_backward(dwte.data(), dout.data(), tokens.data(), c.vocab_begin, c.Vl, c.N,
                                  c.C);

    DeviceBuffer<std::int32_t> d_tokens(tokens);
    DeviceBuffer<T> d_wte(to_dtype<T>(wte)), d_out(rows), d_dout(to_dtype<T>(dout));
    DeviceBuffer<float> d_dwte(dwte0), d_dwte_again(dwte0);
    embedding_shard_forward(d_out.get(), d_tokens.get(), d_wte.get(), c.vocab_begin, c.Vl, c.N, c.C,
                            nullptr);
    EXPECT_EQ(to_floats(d_out.download()), want);  // a copy: exact
    embedding_shard_backward(d_dwte.get(), d_dout.get(), d_tokens.get(), c.vocab_begin, c.Vl, c.N,
                             c.C, this->arena, nullptr);
    embedding_shard_backward(d_dwte_again.get(), d_dout.get(), d_tokens.get(), c.vocab_begin, c.Vl,
                             c.N, c.C, this->arena, nullptr);
    const std::vector<float> got = d_dwte.download();
    // Same summation order as the CPU (existing value, then rows in order): equal, not just close.
    EXPECT_EQ(got, dwte) << "vocab_begin " << c.vocab_begin << " N " << c.N;
    EXPECT_EQ(got, d_dwte_again.download());
    EXPECT_EQ(this->arena.used(), 0u);
  }
}

TYPED_TEST(CudaEmbedding, PositionForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  struct Positions {
    long row_begin;
    int rows, T_, C;
  };
  // Whole batches, a sequence-parallel slice starting mid-sequence, fewer rows than positions.
  for (const Positions p :
       {Positions{0, 64, 16, 8}, Positions{21, 50, 16, 100}, Positions{5, 3, 10, 24}}) {
    const std::size_t n = static_cast<std::size_t>(p.rows) * p.C;
    const std::vector<float> x0 = rounded<T>(random_floats(n, rng));
    const std::vector<float> wpe =
        rounded<T>(random_floats(static_cast<std::size_t>(p.T_) * p.C, rng));
    const std::vector<float> dx = rounded<T>(random_floats(n, rng));
    const std::vector<float> dwpe0 = random_floats(wpe.size(), rng);
    std::vector<float> x = x0, dwpe = dwpe0;
    cpu::position_embedding_forward(x.data(), wpe.data(), p.row_begin, p.rows, p.T_, p.C);
    cpu::position_embedding_backward(dwpe.data(), dx.data(), p.row_begin, p.rows, p.T_, p.C);

    DeviceBuffer<T> d_x(to_dtype<T>(x0)), d_wpe(to_dtype<T>(wpe)), d_dx(to_dtype<T>(dx));
    DeviceBuffer<float> d_dwpe(dwpe0);
    position_embedding_forward(d_x.get(), d_wpe.get(), p.row_begin, p.rows, p.T_, p.C, nullptr);
    position_embedding_backward(d_dwpe.get(), d_dx.get(), p.row_begin, p.rows, p.T_, p.C, nullptr);
    EXPECT_EQ(to_floats(d_x.download()), rounded<T>(x)) << p.row_begin;
    EXPECT_EQ(d_dwpe.download(), dwpe) << p.row_begin;
  }
}

}  // namespace
}  // namespace strata::cuda
