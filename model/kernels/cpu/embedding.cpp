#include "model/kernels/cpu/embedding.h"

namespace strata::cpu {

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B,
                       int T_, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T_; ++bt) {
    const T* token_row = wte + static_cast<long>(tokens[bt]) * C;
    const T* position_row = wpe + static_cast<long>(bt % T_) * C;
    T* out_row = out + static_cast<long>(bt) * C;
    for (int c = 0; c < C; ++c) out_row[c] = token_row[c] + position_row[c];
  }
}

template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int T_,
                        int C) {
  // Parallel over channel slices: every thread touches only its own columns of dwte/dwpe.
  constexpr int kSlice = 16;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice;
    const int c1 = (c0 + kSlice < C) ? c0 + kSlice : C;
    for (int bt = 0; bt < B * T_; ++bt) {
      const T* d = dout + static_cast<long>(bt) * C;
      T* token_row = dwte + static_cast<long>(tokens[bt]) * C;
      T* position_row = dwpe + static_cast<long>(bt % T_) * C;
      for (int c = c0; c < c1; ++c) {
        token_row[c] += d[c];
        position_row[c] += d[c];
      }
    }
  }
}

template void embedding_forward<float>(float*, const std::int32_t*, const float*, const float*, int,
                                       int, int);
template void embedding_forward<double>(double*, const std::int32_t*, const double*, const double*,
                                        int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const std::int32_t*, int, int,
                                        int);
template void embedding_backward<double>(double*, double*, const double*, const std::int32_t*, int,
                                         int, int);

}  // namespace strata::cpu
