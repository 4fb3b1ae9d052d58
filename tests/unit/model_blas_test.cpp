// The CPU GEMMs (model/kernels/cpu/blas.h) against a plain triple loop in double, for every
// transpose and leading dimensions wider than the operands, on whichever library was chosen; and
// the choice of OpenBLAS's core type from feature flags.
#include "model/kernels/cpu/blas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace strata::cpu {
namespace {

TEST(Blas, FloatGemmMatchesALoopForEveryTranspose) {
  const int m = 37, n = 29, k = 53, pad = 3;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "T" : "N") + (tb ? "T" : "N"));
      // Stored row-major as op^-1 of their logical shapes, each row `pad` elements wider.
      const int a_rows = ta ? k : m, a_cols = ta ? m : k, lda = a_cols + pad;
      const int b_rows = tb ? n : k, b_cols = tb ? k : n, ldb = b_cols + pad, ldc = n + pad;
      std::vector<float> a(static_cast<std::size_t>(a_rows) * lda), b(b_rows * ldb);
      std::vector<float> c(static_cast<std::size_t>(m) * ldc);
      for (float& x : a) x = uniform(rng);
      for (float& x : b) x = uniform(rng);
      for (float& x : c) x = uniform(rng);
      const std::vector<float> c0 = c;
      gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double sum = 0;
          for (int p = 0; p < k; ++p)
            sum += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
                   (tb ? b[j * ldb + p] : b[p * ldb + j]);
          const double expected = 0.5 * sum + 2.0 * c0[i * ldc + j];
          EXPECT_NEAR(c[i * ldc + j], expected, 1e-5 * k) << i << "," << j;
        }
        for (int j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);  // untouched
      }
    }
  }
}

TEST(Blas, DoubleGemmMatchesALoop) {
  const int m = 5, n = 4, k = 3;
  std::vector<double> a(m * k), b(n * k), c(m * n, 0.0);
  for (int i = 0; i < m * k; ++i) a[i] = 0.1 * i - 0.7;
  for (int i = 0; i < n * k; ++i) b[i] = 0.3 - 0.05 * i;
  gemm(false, true, m, n, k, 1.0, a.data(), k, b.data(), k, 0.0, c.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += a[i * k + p] * b[j * k + p];
      EXPECT_NEAR(c[i * n + j], sum, 1e-14);
    }
}

TEST(Blas, NamesTheLibraryItRunsOn) {
  const BlasLibrary& library = blas_library();
  EXPECT_TRUE(library.name == "onednn" || library.name == "openblas" || library.name == "blis")
      << library.name;
  EXPECT_FALSE(library.version.empty());
  EXPECT_FALSE(library.kernels.empty());
  EXPECT_EQ(library.threading, "OpenMP");  // one pool with the loops
}

TEST(Blas, OpenblasCoreFollowsTheFeatureFlags) {
  CpuFeatures f;
  EXPECT_EQ(openblas_core_for(f), "");  // SSE only: OpenBLAS's own choice
  f.avx = true;
  EXPECT_EQ(openblas_core_for(f), "Sandybridge");
  f.avx2 = true;
  EXPECT_EQ(openblas_core_for(f), "Sandybridge");  // AVX2 without FMA
  f.fma = true;
  EXPECT_EQ(openblas_core_for(f), "Haswell");
  f.avx512f = f.avx512cd = f.avx512bw = f.avx512dq = true;
  EXPECT_EQ(openblas_core_for(f), "Haswell");  // no AVX-512VL: SkylakeX's kernels use it
  f.avx512vl = true;
  EXPECT_EQ(openblas_core_for(f), "SkylakeX");
}

}  // namespace
}  // namespace strata::cpu
