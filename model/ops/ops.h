// What every backend's ops object shares: the names an op call uses for choices that are not
// plain shapes. A model's passes call one ops object (CpuOps<T> in cpu_ops.h today) whose ops
// each round their own outputs, so the passes themselves contain no rounding.
#pragma once

namespace strata {

// What a linear layer's forward does after its product, out = inp·Wᵀ (+ bias).
enum class Epilogue {
  bias,       // out = inp·Wᵀ + bias (bias may be null)
  gelu,       // pre_gelu = inp·Wᵀ + bias, out = gelu(pre_gelu). CPU: the bias folded into the
              // product, rounded, GELU, rounded (the MoE experts' order)
  bias_gelu,  // the same function. CPU: a bias-free product, then bias, rounding, GELU and
              // rounding in one pass (bias_gelu_forward, the dense MLP's order). The two CPU
              // orders differ in the last bits (kernels/cpu/gelu.h), hence two names.
};

// Rows [begin, begin + count) of a row-parallel layer's output gradient: the ones whose sum a
// replicated bias gradient takes on this rank (all N rows without sequence parallelism).
struct RowRange {
  int begin = 0, count = 0;
};

}  // namespace strata
