// CpuOps<T>'s FP8 casts (cpu_ops.h fp8_cast): the emulation of an FP8 GEMM's operands, each value
// scaled, encoded, decoded and unscaled by the functions the GPU's casts call (kernels/fp8.h), so
// the CPU multiplies exactly the operand values an FP8 tensor core would.
#include <algorithm>

#include "model/core/error.h"
#include "model/fp8/fp8_state.h"
#include "model/kernels/fp8.h"
#include "model/ops/cpu_ops.h"

namespace strata {

template <class T>
void CpuOps<T>::reduce_amaxes(std::span<float> amaxes, Fp8AmaxGroups groups) {
  if (groups.tp && tp_->size() > 1) all_reduce_amax(*tp_, amaxes);
  if (groups.cp && cp_ != nullptr && cp_->size() > 1) all_reduce_amax(*cp_, amaxes);
}

template <class T>
auto CpuOps<T>::fp8_cast(const Value* x, int rows, int cols, const Fp8Gemm& fp8, Fp8Operand operand,
                         bool along_columns, std::vector<T>& out) -> const Value* {
  Fp8State& state = *fp8.state;
  const Fp8Format format = state.format(operand);
  const long n = static_cast<long>(rows) * cols;
  if (out.size() < static_cast<std::size_t>(n)) out.resize(static_cast<std::size_t>(n));
  // fp8_dequantize(fp8_quantize(x, scale)) by arithmetic alone (fp8_round_finite, the same
  // values): a value that is not finite becomes NaN, as fp8_quantize makes it.
  auto cast = [&](long i, float scale) {
    const float value = static_cast<float>(x[i]);
    out[static_cast<std::size_t>(i)] = static_cast<T>(
        value - value == 0.0f ? fp8_round_finite(value * scale, format) / scale : NAN);
  };

  if (state.settings().scaling == Fp8Scaling::rowwise) {
    // One scale per row of the sum: per row of x when the sum runs along its columns, else per
    // column.
    const Fp8Axis axis = along_columns ? Fp8Axis::rows : Fp8Axis::columns;
    fp8_amax_.assign(static_cast<std::size_t>(along_columns ? rows : cols), 0.0f);
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) {
        float& amax = fp8_amax_[static_cast<std::size_t>(along_columns ? r : c)];
        amax = fp8_amax_step(amax, static_cast<float>(x[r * cols + c]));
      }
    reduce_amaxes(fp8_amax_, fp8_amax_groups(operand, fp8.row_parallel, axis));
    for (float& amax : fp8_amax_) amax = fp8_scale(amax, format);  // now the scales
#pragma omp parallel for if (n >= (1 << 16))
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c)
        cast(r * cols + c, fp8_amax_[static_cast<std::size_t>(along_columns ? r : c)]);
    return out.data();
  }

  // One scale for the tensor: from the delayed recipe's history once it holds a step, else from
  // the tensor's own amax over every rank holding part of it.
  float amax = 0.0f;
#pragma omp parallel for reduction(max : amax) if (n >= (1 << 16))
  for (long i = 0; i < n; ++i) amax = fp8_amax_step(amax, static_cast<float>(x[i]));
  state.record(fp8.layer, fp8.gemm, operand, amax);
  if (state.settings().scaling == Fp8Scaling::delayed &&
      state.has_history(fp8.layer, fp8.gemm, operand)) {
    amax = state.history_amax(fp8.layer, fp8.gemm, operand);
  } else {
    reduce_amaxes(std::span<float>(&amax, 1),
                  fp8_amax_groups(operand, fp8.row_parallel, Fp8Axis::tensor));
  }
  const float scale = fp8_scale(amax, format);
#pragma omp parallel for if (n >= (1 << 16))
  for (long i = 0; i < n; ++i) cast(i, scale);
  return out.data();
}

// The two members defined here (cpu_ops.cpp instantiates the class).
#define STRATA_INSTANTIATE_FP8_CAST(T)                                                    \
  template void CpuOps<T>::reduce_amaxes(std::span<float>, Fp8AmaxGroups);                \
  template auto CpuOps<T>::fp8_cast(const T*, int, int, const Fp8Gemm&, Fp8Operand, bool, \
                                    std::vector<T>&)                                      \
      ->const T*;
STRATA_INSTANTIATE_FP8_CAST(float)
STRATA_INSTANTIATE_FP8_CAST(double)
#undef STRATA_INSTANTIATE_FP8_CAST

}  // namespace strata
