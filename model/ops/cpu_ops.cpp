// CpuOps<T> (cpu_ops.h): each op is its kernel calls followed by the rounding of what they wrote,
// exactly the sequence the GPT block ran inline before the ops existed.
#include "model/ops/cpu_ops.h"

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/residual.h"

namespace strata {

template <class T>
void CpuOps<T>::round_to_compute(Value* data, long n) const {
  if (compute_ != cpu::ComputeDtype::fp32) cpu::round_to_dtype(data, n, compute_);
}

template <class T>
void CpuOps<T>::matmul_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                               const Value* bias, int N, int IC, int OC, Epilogue epilogue) {
  const long n = static_cast<long>(N) * OC;
  switch (epilogue) {
    case Epilogue::bias:
      cpu::matmul_forward(out, inp, weight, bias, N, IC, OC);
      round_to_compute(out, n);
      return;
    case Epilogue::gelu:  // the bias inside the product
      cpu::matmul_forward(pre_gelu, inp, weight, bias, N, IC, OC);
      round_to_compute(pre_gelu, n);
      cpu::gelu_forward(out, pre_gelu, n);
      round_to_compute(out, n);
      return;
    case Epilogue::bias_gelu:  // the bias added after the product, with the GELU (both rounded)
      cpu::matmul_forward(pre_gelu, inp, weight, static_cast<const T*>(nullptr), N, IC, OC);
      cpu::bias_gelu_forward(out, pre_gelu, bias, N, OC, compute_);
      return;
  }
  STRATA_CHECK(false, "unknown matmul epilogue");
}

template <class T>
void CpuOps<T>::matmul_backward_input(Value* dinp, const Value* dout, const Value* weight, int N,
                                      int IC, int OC) {
  cpu::matmul_backward_input(dinp, dout, weight, N, IC, OC);
  round_to_compute(dinp, static_cast<long>(N) * IC);
}

template <class T>
void CpuOps<T>::matmul_backward_weight(Grad* dweight, Grad* dbias, const Value* dout,
                                       const Value* inp, int N, int IC, int OC) {
  cpu::matmul_backward_weight(dweight, dbias, dout, inp, N, IC, OC);
}

template <class T>
void CpuOps<T>::matmul_backward_weight_rows(Grad* dweight, Grad* dbias, const Value* dout,
                                            const Value* inp, int N, int IC, int OC,
                                            RowRange bias_rows) {
  if (dbias != nullptr)
    cpu::bias_backward(dbias, dout + static_cast<long>(bias_rows.begin) * OC, bias_rows.count, OC);
  cpu::matmul_backward_weight(dweight, static_cast<T*>(nullptr), dout, inp, N, IC, OC);
}

template <class T>
void CpuOps<T>::gelu_forward(Value* out, const Value* inp, long n) {
  cpu::gelu_forward(out, inp, n);
  round_to_compute(out, n);
}

template <class T>
void CpuOps<T>::gelu_backward(Value* dinp, const Value* inp, const Value* dout, long n) {
  cpu::gelu_backward(dinp, inp, dout, n);
  round_to_compute(dinp, n);
}

template <class T>
void CpuOps<T>::layernorm_forward(Value* out, Stat* mean, Stat* rstd, const Value* inp,
                                  const Value* weight, const Value* bias, int N, int C) {
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  round_to_compute(out, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::residual_layernorm_forward(Value* sum_out, Value* out, Stat* mean, Stat* rstd,
                                           const Value* residual, const Value* y,
                                           const Value* y_bias, const Value* weight,
                                           const Value* bias, int N, int C) {
  cpu::residual_layernorm_forward(sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N, C,
                                  compute_);
}

template <class T>
void CpuOps<T>::layernorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                         const Value* weight, const Stat* mean, const Stat* rstd,
                                         int N, int C) {
  cpu::layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
  round_to_compute(dinp, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::layernorm_backward_weight(Grad* dweight, Grad* dbias, const Value* dout,
                                          const Value* inp, const Stat* mean, const Stat* rstd,
                                          int N, int C) {
  cpu::layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C);
}

template <class T>
void CpuOps<T>::residual_bias_forward(Value* out, const Value* x, const Value* y, const Value* bias,
                                      int N, int C) {
  cpu::residual_bias_forward(out, x, y, bias, N, C);
  round_to_compute(out, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::attention_forward(Value* out, Stat* lse, const Value* qkv, int B, int T_, int C,
                                  int NH) {
  STRATA_CHECK(lse == nullptr, "the CPU's attention keeps no statistics (kLsePerRow is 0)");
  cpu::attention_forward(out, qkv, B, T_, C, NH, attention_);
  round_to_compute(out, static_cast<long>(B) * T_ * C);
}

template <class T>
void CpuOps<T>::attention_backward(Value* dqkv, const Value* dout, const Value* qkv,
                                   const Value* /*out*/, const Stat* /*lse*/, int B, int T_, int C,
                                   int NH) {
  cpu::attention_backward(dqkv, dout, qkv, B, T_, C, NH, compute_, attention_);
  round_to_compute(dqkv, 3L * B * T_ * C);
}

template class CpuOps<float>;
template class CpuOps<double>;

}  // namespace strata
