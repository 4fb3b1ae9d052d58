#include "model/kernels/cpu/matmul.h"

#include "model/kernels/cpu/blas.h"

namespace strata::cpu {

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC) {
  T beta = 0;
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[static_cast<long>(n) * OC + o] = bias[o];
    beta = 1;
  }
  gemm(false, true, N, OC, IC, T(1), inp, IC, weight, IC, beta, out, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int IC, int OC) {
  if (dinp != nullptr) matmul_backward_input(dinp, dout, weight, N, IC, OC);
  matmul_backward_weight(dweight, dbias, dout, inp, N, IC, OC);
}

template <class T>
void matmul_backward_input(T* dinp, const T* dout, const T* weight, int N, int IC, int OC) {
  gemm(false, false, N, IC, OC, T(1), dout, OC, weight, IC, T(0), dinp, IC);
}

template <class T>
void matmul_backward_weight(T* dweight, T* dbias, const T* dout, const T* inp, int N, int IC,
                            int OC) {
  gemm(true, false, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);
  if (dbias != nullptr) {
    // Column sums over blocks of channels: each thread owns whole blocks (no races), rows are read
    // contiguously, and the summation order over n is fixed, so results are bitwise reproducible.
    constexpr int kBlock = 64;
    const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kBlock;
      const int width = (OC - o0 < kBlock) ? OC - o0 : kBlock;
      T sum[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* row = dout + static_cast<long>(n) * OC + o0;
        for (int o = 0; o < width; ++o) sum[o] += row[o];
      }
      for (int o = 0; o < width; ++o) dbias[o0 + o] += sum[o];
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int);
template void matmul_backward_input<float>(float*, const float*, const float*, int, int, int);
template void matmul_backward_input<double>(double*, const double*, const double*, int, int, int);
template void matmul_backward_weight<float>(float*, float*, const float*, const float*, int, int,
                                            int);
template void matmul_backward_weight<double>(double*, double*, const double*, const double*, int,
                                             int, int);

}  // namespace strata::cpu
