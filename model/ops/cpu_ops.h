// CpuOps<T>: the CPU's ops for the GPT block's passes (T = float, or double for the
// finite-difference reference), over the reference kernels of model/kernels/cpu.
//
// Each op runs its kernels and then rounds every activation (or activation gradient) it writes to
// the compute dtype, as a bf16/fp16 kernel would store it (kernels/cpu/precision.h): the rounding
// that Gpt<T> did between kernel calls now belongs to the op that produced the value, on the same
// range, in the same order, so results are bitwise those of the kernel sequence. Nothing is
// rounded in fp32, nor are statistics (LayerNorm mean/rstd) or parameter gradients, which
// accumulate in T. Shapes: N rows, IC/OC a linear layer's in/out channels ([out, in] weights),
// C channels, B·T_ = N rows of attention with NH heads.
//
// One object serves one model: it owns attention's scratch, which two calls must not share at
// once (kernels/cpu/attention.h).
#pragma once

#include <vector>

#include "model/kernels/cpu/precision.h"
#include "model/ops/ops.h"

namespace strata {

template <class T>
class CpuOps {
 public:
  using Value = T;   // activations, activation gradients, weights
  using Grad = T;    // parameter gradients
  using Stat = T;    // LayerNorm statistics
  using Scalar = T;  // loss scale, losses
  // Attention statistics kept per (row, head) for the backward: none, it recomputes them.
  static constexpr long kLsePerRow = 0;

  explicit CpuOps(cpu::ComputeDtype compute) : compute_(compute) {}
  cpu::ComputeDtype compute() const { return compute_; }

  // data[0, n) rounded to the compute dtype in place; nothing in fp32.
  void round_to_compute(Value* data, long n) const;

  // Linear layers, out (N, OC) = inp (N, IC)·weightᵀ + bias; bias may be null. `bias`: out
  // rounded, pre_gelu unused (null). `gelu`/`bias_gelu`: pre_gelu (N, OC) = the product with its
  // bias, out = gelu(pre_gelu), both rounded (ops.h says where each adds the bias).
  void matmul_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                      const Value* bias, int N, int IC, int OC, Epilogue epilogue);
  // dinp (N, IC) = dout·weight, overwritten and rounded.
  void matmul_backward_input(Value* dinp, const Value* dout, const Value* weight, int N, int IC,
                             int OC);
  // dweight (OC, IC) += doutᵀ·inp, dbias (OC) += Σ_n dout (may be null); not rounded.
  void matmul_backward_weight(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                              int N, int IC, int OC);
  // A row-parallel layer: dweight over all N rows, its replicated bias over `bias_rows` only,
  // summed row by row first (bias_backward: not the bits of matmul_backward_weight's column sums).
  void matmul_backward_weight_rows(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                                   int N, int IC, int OC, RowRange bias_rows);

  // GELU on its own (the MLP's fused forward is matmul_forward's epilogue): out rounded; the
  // backward dinp = gelu'(inp)·dout, rounded.
  void gelu_forward(Value* out, const Value* inp, long n);
  void gelu_backward(Value* dinp, const Value* inp, const Value* dout, long n);

  // LayerNorm (kernels/cpu/layernorm.h): out rounded, mean and rstd (N) as computed.
  void layernorm_forward(Value* out, Stat* mean, Stat* rstd, const Value* inp, const Value* weight,
                         const Value* bias, int N, int C);
  // sum_out = residual + (y + y_bias), out = LayerNorm(sum_out): both rounded (one fused pass).
  void residual_layernorm_forward(Value* sum_out, Value* out, Stat* mean, Stat* rstd,
                                  const Value* residual, const Value* y, const Value* y_bias,
                                  const Value* weight, const Value* bias, int N, int C);
  // dinp (N, C) += the input gradient, then dinp rounded (all of it: it is the running residual
  // gradient, rounded after each addition).
  void layernorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                const Value* weight, const Stat* mean, const Stat* rstd, int N,
                                int C);
  // dweight, dbias (C) += ...; not rounded.
  void layernorm_backward_weight(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                                 const Stat* mean, const Stat* rstd, int N, int C);

  // out (N, C) = x + (y + bias), rounded; bias may be null; out may alias x.
  void residual_bias_forward(Value* out, const Value* x, const Value* y, const Value* bias, int N,
                             int C);

  // Causal attention on packed qkv (B·T_, 3C) → out (B·T_, C), rounded; lse: kLsePerRow·B·T_·NH
  // statistics for the backward (here none: null). The backward recomputes the probabilities
  // from qkv alone (it reads neither the forward's out nor lse), rounded to the compute dtype as
  // the forward had written them, and overwrites dqkv (rounded). out and lse are in the
  // signature because a backend that keeps the statistics (CUDA) reads them.
  void attention_forward(Value* out, Stat* lse, const Value* qkv, int B, int T_, int C, int NH);
  void attention_backward(Value* dqkv, const Value* dout, const Value* qkv, const Value* out,
                          const Stat* lse, int B, int T_, int C, int NH);

 private:
  cpu::ComputeDtype compute_;
  std::vector<T> attention_;  // attention's per-thread scratch, grown as needed and kept
};

extern template class CpuOps<float>;
extern template class CpuOps<double>;

}  // namespace strata
