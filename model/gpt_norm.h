// The model's normalisation (model.norm, model.norm_eps; model/gpt_architecture.h) as one call
// per use for the passes: GptNorm<Ops> runs LayerNorm or RMSNorm through the ops with the model's
// ε, so a block's or the head's norm is one line whichever the model has. RMSNorm has no mean and
// no bias: its calls leave `mean` unwritten and ignore `bias` (null in a model without biases).
#pragma once

#include "model/gpt_architecture.h"
#include "model/ops/ops.h"

namespace strata {

template <class Ops>
struct GptNorm {
  using V = typename Ops::Value;
  using S = typename Ops::Stat;
  using G = typename Ops::Grad;

  Ops& ops;
  Norm kind = Norm::layernorm;
  double eps = 1e-5;

  // out (N, C) = norm(x); mean and rstd (N) for the backward. `cast_for`: the FP8 GEMM that reads
  // out next, whose cast a backend may fuse into the norm (CudaOps::fused_cast; empty: none).
  void forward(V* out, S* mean, S* rstd, const V* x, const V* weight, const V* bias, int N, int C,
               const Fp8Gemm& cast_for = {}) const {
    if (kind == Norm::rmsnorm)
      ops.rmsnorm_forward(out, rstd, x, weight, N, C, eps, cast_for);
    else
      ops.layernorm_forward(out, mean, rstd, x, weight, bias, N, C, eps, cast_for);
  }
  // sum_out = residual + (y + y_bias), out = norm(sum_out), in one op.
  void residual_forward(V* sum_out, V* out, S* mean, S* rstd, const V* residual, const V* y,
                        const V* y_bias, const V* weight, const V* bias, int N, int C,
                        const Fp8Gemm& cast_for = {}) const {
    if (kind == Norm::rmsnorm)
      ops.residual_rmsnorm_forward(sum_out, out, rstd, residual, y, y_bias, weight, N, C, eps,
                                   cast_for);
    else
      ops.residual_layernorm_forward(sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N,
                                     C, eps, cast_for);
  }
  // dinp (N, C) += the input gradient (rounded, as the ops do).
  void backward_input(V* dinp, const V* dout, const V* x, const V* weight, const S* mean,
                      const S* rstd, int N, int C) const {
    if (kind == Norm::rmsnorm)
      ops.rmsnorm_backward_input(dinp, dout, x, weight, rstd, N, C);
    else
      ops.layernorm_backward_input(dinp, dout, x, weight, mean, rstd, N, C);
  }
  // dweight (and dbias, LayerNorm's where non-null) += ...
  void backward_weight(G* dweight, G* dbias, const V* dout, const V* x, const S* mean,
                       const S* rstd, int N, int C) const {
    if (kind == Norm::rmsnorm)
      ops.rmsnorm_backward_weight(dweight, dout, x, rstd, N, C);
    else
      ops.layernorm_backward_weight(dweight, dbias, dout, x, mean, rstd, N, C);
  }
};

}  // namespace strata
