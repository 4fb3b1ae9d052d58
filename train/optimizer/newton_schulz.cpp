#include "train/optimizer/newton_schulz.h"

#include <cmath>
#include <vector>

#include "model/kernels/cpu/blas.h"

namespace strata {
namespace {

template <class T>
void orthogonalise(T* x, int rows, int cols, int steps) {
  constexpr T a = T(3.4445), b = T(-4.7750), c = T(2.0315);
  const bool tall = rows > cols;
  const int r = tall ? cols : rows, k = tall ? rows : cols;  // X is [r, k], r <= k
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  std::vector<T> work(n), product(n), gram(static_cast<std::size_t>(r) * r),
      poly(static_cast<std::size_t>(r) * r);
  double norm = 0;
  for (std::size_t i = 0; i < n; ++i) norm += static_cast<double>(x[i]) * x[i];
  const T scale = T(1) / static_cast<T>(std::sqrt(norm) + 1e-7);
  if (tall) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        work[static_cast<std::size_t>(j) * rows + i] = x[static_cast<std::size_t>(i) * cols + j];
  } else {
    work.assign(x, x + n);
  }
  for (T& v : work) v *= scale;
  for (int s = 0; s < steps; ++s) {
    // A = X·Xᵀ; B = b·A + c·A·A; X = a·X + B·X.
    cpu::gemm(false, true, r, r, k, T(1), work.data(), k, work.data(), k, T(0), gram.data(), r);
    poly = gram;
    cpu::gemm(false, false, r, r, r, c, gram.data(), r, gram.data(), r, b, poly.data(), r);
    product = work;
    cpu::gemm(false, false, r, k, r, T(1), poly.data(), r, work.data(), k, a, product.data(), k);
    work.swap(product);
  }
  if (tall) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        x[static_cast<std::size_t>(i) * cols + j] = work[static_cast<std::size_t>(j) * rows + i];
  } else {
    for (std::size_t i = 0; i < n; ++i) x[i] = work[i];
  }
}

}  // namespace

void newton_schulz(float* x, int rows, int cols, int steps) { orthogonalise(x, rows, cols, steps); }
void newton_schulz(double* x, int rows, int cols, int steps) {
  orthogonalise(x, rows, cols, steps);
}

}  // namespace strata
