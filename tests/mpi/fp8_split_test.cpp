// FP8 GEMMs split over ranks (docs/ARCHITECTURE.md §6 "FP8"), run inside mpirun on 2 ranks: a
// linear layer's three products with its operands split as tensor parallelism splits them
// (column-parallel: the weight's rows and the output's columns; row-parallel: the input's and the
// weight's columns) or as context parallelism splits a micro-batch's rows give the whole layer's
// result on one rank, for the per-tensor and the per-row recipes: every scale is the logical
// tensor's, row's or column's, its amax reduced over the group. Scales are powers of two, so a
// scale that differs only moves values between binades, which changes nothing until they fall
// below the format's normal range. So the operands are built with parts 2^16 apart along the
// split: in the sum over the split dimension one operand's first parts are 2^16 smaller than its
// last, the other's 2^16 larger, so that every part contributes alike. Scaled by the whole's
// amax, the small parts' values are subnormal in e4m3 and keep a bit or two; a scale taken from a
// rank's part alone would keep all three and fail the comparison (checked by running this test
// with the amax reductions removed: every case fails).
//
// Tolerance: max |difference| ≤ 1e-5 · max |whole| per tensor: the same FP8 operands, summed in
// fp32 in another order (partial products over the group). The casts are e4m3's: the reductions
// do not depend on the format.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/fp8/fp8_state.h"
#include "model/ops/cpu_ops.h"
#include "parallel/comm/mpi_communicator.h"

namespace strata {
namespace {

constexpr int N = 16, IC = 24, OC = 20;

// (rows, cols) values whose parts along rows (or cols) of a split in `parts` are 2^exponent times
// the last part's.
std::vector<float> operand(int rows, int cols, unsigned seed, int parts = 1, bool split_rows = true,
                           int exponent = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int part = split_rows ? r / (rows / parts) : c / (cols / parts);
      m[r * cols + c] = normal(rng) * (part + 1 == parts ? 1.0f : std::ldexp(1.0f, exponent));
    }
  return m;
}

// Rows [first, first + count) or columns of (rows, cols).
std::vector<float> rows_of(const std::vector<float>& m, int cols, int first, int count) {
  return {m.begin() + first * cols, m.begin() + (first + count) * cols};
}
std::vector<float> columns_of(const std::vector<float>& m, int rows, int cols, int first,
                              int count) {
  std::vector<float> out;
  for (int r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + r * cols + first, m.begin() + r * cols + first + count);
  return out;
}

void expect_close(const std::vector<float>& actual, const std::vector<float>& whole,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), whole.size()) << what;
  float largest = 0, worst = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    largest = std::max(largest, std::fabs(whole[i]));
    worst = std::max(worst, std::fabs(actual[i] - whole[i]));
  }
  EXPECT_LE(worst, 1e-5f * largest) << what;
}

struct Products {
  std::vector<float> out, dinp, dweight;
};

// The layer's forward, input gradient and weight gradient by `ops` (the given operands).
Products products(CpuOps<float>& ops, Fp8State& state, bool row_parallel,
                  const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& dy, int n, int ic, int oc) {
  const Fp8Gemm fp8{&state, 0, row_parallel ? Fp8Layer::attn_proj : Fp8Layer::qkv, row_parallel};
  Products p{std::vector<float>(n * oc), std::vector<float>(n * ic), std::vector<float>(oc * ic)};
  ops.matmul_forward(p.out.data(), nullptr, x.data(), w.data(), nullptr, n, ic, oc, Epilogue::bias,
                     fp8);
  ops.matmul_backward_input(p.dinp.data(), dy.data(), w.data(), nullptr, n, ic, oc, fp8);
  ops.matmul_backward_weight(p.dweight.data(), nullptr, dy.data(), x.data(), n, ic, oc, fp8);
  return p;
}

Fp8State state_of(Fp8Scaling scaling) {
  Fp8Settings settings;
  settings.scaling = scaling;
  settings.formats = Fp8Formats::e4m3;
  settings.min_size = 0;
  return Fp8State(settings, 0, {{true, true, true, true}});
}

class Fp8Split : public ::testing::TestWithParam<Fp8Scaling> {
 protected:
  Fp8Split() : world_(MPI_COMM_WORLD, 8) {}
  MpiCommunicator world_;
};

TEST_P(Fp8Split, TensorParallelLayersMultiplyTheWholeLayersOperands) {
  const int tp = world_.size(), rank = world_.rank();
  for (const bool row_parallel : {false, true}) {
    SCOPED_TRACE(row_parallel ? "row-parallel" : "column-parallel");
    // The whole layer, its operands' parts along the split dimension 2^16 apart.
    const auto x = row_parallel ? operand(N, IC, 1, tp, false, -16) : operand(N, IC, 1);
    const auto w =
        row_parallel ? operand(OC, IC, 2, tp, false, 16) : operand(OC, IC, 2, tp, true, 16);
    const auto dy = row_parallel ? operand(N, OC, 3) : operand(N, OC, 3, tp, false, -16);
    Fp8State whole_state = state_of(GetParam());
    CpuOps<float> alone(cpu::ComputeDtype::fp32);
    const Products whole = products(alone, whole_state, row_parallel, x, w, dy, N, IC, OC);

    Fp8State state = state_of(GetParam());
    CpuOps<float> ops(cpu::ComputeDtype::fp32, &world_);
    if (!row_parallel) {  // this rank's output channels: w's rows, dy's columns
      const int ocl = OC / tp, first = rank * ocl;
      Products p = products(ops, state, false, x, rows_of(w, IC, first, ocl),
                            columns_of(dy, N, OC, first, ocl), N, IC, ocl);
      world_.all_reduce_sum(p.dinp.data(), p.dinp.size());  // partial sums over the channels
      expect_close(p.out, columns_of(whole.out, N, OC, first, ocl), "out");
      expect_close(p.dinp, whole.dinp, "d input");
      expect_close(p.dweight, rows_of(whole.dweight, IC, first, ocl), "d weight");
    } else {  // this rank's input channels: x's and w's columns
      const int icl = IC / tp, first = rank * icl;
      Products p = products(ops, state, true, columns_of(x, N, IC, first, icl),
                            columns_of(w, OC, IC, first, icl), dy, N, icl, OC);
      world_.all_reduce_sum(p.out.data(), p.out.size());
      expect_close(p.out, whole.out, "out");
      expect_close(p.dinp, columns_of(whole.dinp, N, IC, first, icl), "d input");
      expect_close(p.dweight, columns_of(whole.dweight, OC, IC, first, icl), "d weight");
    }
  }
}

TEST_P(Fp8Split, ContextParallelRowsMultiplyTheWholeMicroBatchsOperands) {
  const int cp = world_.size(), rank = world_.rank();
  const auto x = operand(N, IC, 4, cp, true, 16), w = operand(OC, IC, 5),
             dy = operand(N, OC, 6, cp, true, -16);
  Fp8State whole_state = state_of(GetParam());
  CpuOps<float> alone(cpu::ComputeDtype::fp32);
  const Products whole = products(alone, whole_state, false, x, w, dy, N, IC, OC);

  Fp8State state = state_of(GetParam());
  CpuOps<float> ops(cpu::ComputeDtype::fp32, nullptr, false, &world_);
  const int nl = N / cp, first = rank * nl;
  Products p = products(ops, state, false, rows_of(x, IC, first, nl), w, rows_of(dy, OC, first, nl),
                        nl, IC, OC);
  world_.all_reduce_sum(p.dweight.data(), p.dweight.size());  // partial sums over the rows
  expect_close(p.out, rows_of(whole.out, OC, first, nl), "out");
  expect_close(p.dinp, rows_of(whole.dinp, IC, first, nl), "d input");
  expect_close(p.dweight, whole.dweight, "d weight");
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8Split,
                         ::testing::Values(Fp8Scaling::tensorwise, Fp8Scaling::rowwise,
                                           Fp8Scaling::delayed),
                         [](const auto& info) {
                           return std::string(kFp8ScalingChoices.word(info.param));
                         });

}  // namespace
}  // namespace strata
