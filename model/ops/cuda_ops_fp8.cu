// CudaOps<T>'s FP8 GEMMs (cuda_ops.h; docs/ARCHITECTURE.md §6 "FP8"): each operand's amax, its
// reduction over the ranks holding the tensor's other parts (CpuOps::fp8_cast's rules), its scale
// (from the amax, or from the delayed recipe's history the host keeps) and its codes, then
// cuBLASLt's FP8 GEMM on K-major codes. The products' layouts (matmul.h fp8_matmul: a (rows, K)
// and b (cols, K)):
//   forward      out (N, OC)   = input (N, IC) · weight (OC, IC)ᵀ       codes as stored
//   d input      dinp (N, IC)  = grad (N, OC) · weightᵀ (IC, OC)ᵀ       the weight transposed
//   d weight     dW (OC, IC)  += gradᵀ (OC, N) · inputᵀ (IC, N)ᵀ        both transposed
// so a GEMM casts its two operands each time (the weight's codes are not kept between the
// forward and the backward yet). Per-tensor scales only: `rowwise` is refused on CUDA.
#include <cuda_bf16.h>

#include <type_traits>

#include "model/core/error.h"
#include "model/fp8/fp8_state.h"
#include "model/kernels/cuda/fp8_cast.h"
#include "model/kernels/cuda/gelu.h"
#include "model/kernels/cuda/matmul.h"
#include "model/ops/cuda_ops.h"

namespace strata::cuda {

template <class T>
void CudaOps<T>::use_fp8(DeviceCollectives* cp, std::size_t sites) {
  fp8_cp_ = cp;
  if (sites == 0) return;
  fp8_step_ = DeviceBuffer<float>(sites);
  STRATA_CUDA_CHECK(cudaMemsetAsync(fp8_step_.get(), 0, sites * sizeof(float), ctx_.stream()));
}

template <class T>
auto CudaOps<T>::fp8_cast(const Value* x, int rows, int cols, const Fp8Gemm& fp8,
                          Fp8Operand operand, Fp8Split split, bool transpose) -> Fp8Codes {
  Fp8State& state = *fp8.state;
  const Fp8Scaling scaling = state.settings().scaling;
  STRATA_CHECK(scaling != Fp8Scaling::rowwise,
               "precision.fp8: rowwise is not built on CUDA yet (tensorwise and delayed are)");
  const Fp8Format format = state.format(operand);
  const cudaStream_t stream = ctx_.stream();
  float* amax = scratch_.allocate<float>(1);
  float* scale = scratch_.allocate<float>(1);
  float* inverse = scratch_.allocate<float>(1);
  auto* codes = scratch_.allocate<std::uint8_t>(static_cast<std::size_t>(rows) * cols);
  fp8_amaxes(amax, x, rows, cols, Fp8Axis::tensor, stream);
  const bool delayed = scaling == Fp8Scaling::delayed;
  if (delayed) {
    STRATA_CHECK(fp8_step_.get() != nullptr, "the delayed recipe's step amaxes are not kept");
    fp8_keep_largest(fp8_step_.get() + state.site(fp8.layer, fp8.gemm, operand), amax, stream);
  }
  if (delayed && state.has_history(fp8.layer, fp8.gemm, operand)) {
    fp8_scale_of(scale, inverse, state.history_amax(fp8.layer, fp8.gemm, operand), format, stream);
  } else {
    if ((split.columns_over_tp || split.rows_over_tp) && tp_ != nullptr && tp_->size() > 1)
      tp_->all_reduce_max(amax, 1, stream);
    if (split.rows_over_cp && fp8_cp_ != nullptr && fp8_cp_->size() > 1)
      fp8_cp_->all_reduce_max(amax, 1, stream);
    fp8_scales(scale, inverse, amax, 1, format, stream);
  }
  cuda::fp8_cast(codes, x, scale, rows, cols, Fp8Axis::tensor, transpose, format, stream);
  return {codes, inverse, format};
}

template <class T>
void CudaOps<T>::fp8_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                             const Value* bias, int N, int IC, int OC, const Fp8Gemm& fp8) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    fail("FP8 GEMMs take bf16 operands (precision.compute: bf16)");
  } else {
    const bool rp = fp8.row_parallel;
    ArenaScope scope(scratch_);
    const Fp8Codes x = fp8_cast(inp, N, IC, fp8, Fp8Operand::input,
                                {.columns_over_tp = rp, .rows_over_cp = true}, false);
    const Fp8Codes w = fp8_cast(weight, OC, IC, fp8, Fp8Operand::weight,
                                {.columns_over_tp = rp, .rows_over_tp = !rp}, false);
    T* product = pre_gelu != nullptr ? pre_gelu : out;
    // The bias into the arena: a tensor of the packed parameters may start at any element, and
    // cuBLASLt's FP8 kernels want every pointer 16-byte aligned.
    const T* aligned_bias = nullptr;
    if (bias != nullptr) {
      T* copy = scratch_.allocate<T>(static_cast<std::size_t>(OC));
      this->copy(copy, bias, static_cast<std::size_t>(OC));
      aligned_bias = copy;
    }
    fp8_matmul(ctx_, product, x.codes, x.format, x.inverse, w.codes, w.format, w.inverse, N, OC, IC,
               0.0f, aligned_bias);
    if (pre_gelu != nullptr) gelu_forward(out, pre_gelu, static_cast<long>(N) * OC);
  }
}

template <class T>
void CudaOps<T>::fp8_backward_input(Value* dinp, const Value* dout, const Value* weight,
                                    const Value* pre_gelu, int N, int IC, int OC,
                                    const Fp8Gemm& fp8) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    fail("FP8 GEMMs take bf16 operands (precision.compute: bf16)");
  } else {
    const bool rp = fp8.row_parallel;
    ArenaScope scope(scratch_);
    const Fp8Codes dy = fp8_cast(dout, N, OC, fp8, Fp8Operand::grad_output,
                                 {.columns_over_tp = !rp, .rows_over_cp = true}, false);
    const Fp8Codes wt = fp8_cast(weight, OC, IC, fp8, Fp8Operand::weight,
                                 {.columns_over_tp = rp, .rows_over_tp = !rp}, true);
    fp8_matmul(ctx_, dinp, dy.codes, dy.format, dy.inverse, wt.codes, wt.format, wt.inverse, N, IC,
               OC, 0.0f);
    if (pre_gelu != nullptr) gelu_backward(dinp, pre_gelu, dinp, static_cast<long>(N) * IC);
  }
}

template <class T>
void CudaOps<T>::fp8_backward_weight(Grad* dweight, const Value* dout, const Value* inp, int N,
                                     int IC, int OC, const Fp8Gemm& fp8) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    fail("FP8 GEMMs take bf16 operands (precision.compute: bf16)");
  } else {
    const bool rp = fp8.row_parallel;
    ArenaScope scope(scratch_);
    const Fp8Codes dyt = fp8_cast(dout, N, OC, fp8, Fp8Operand::grad_output,
                                  {.columns_over_tp = !rp, .rows_over_cp = true}, true);
    const Fp8Codes xt = fp8_cast(inp, N, IC, fp8, Fp8Operand::input,
                                 {.columns_over_tp = rp, .rows_over_cp = true}, true);
    fp8_matmul(ctx_, dweight, dyt.codes, dyt.format, dyt.inverse, xt.codes, xt.format, xt.inverse,
               OC, IC, N, 1.0f);
  }
}

// The members defined here (cuda_ops.cu instantiates the class).
#define STRATA_INSTANTIATE_FP8(T)                                                               \
  template void CudaOps<T>::use_fp8(DeviceCollectives*, std::size_t);                           \
  template auto CudaOps<T>::fp8_cast(const T*, int, int, const Fp8Gemm&, Fp8Operand, Fp8Split,  \
                                     bool)                                                      \
      ->Fp8Codes;                                                                               \
  template void CudaOps<T>::fp8_forward(T*, T*, const T*, const T*, const T*, int, int, int,    \
                                        const Fp8Gemm&);                                        \
  template void CudaOps<T>::fp8_backward_input(T*, const T*, const T*, const T*, int, int, int, \
                                               const Fp8Gemm&);                                 \
  template void CudaOps<T>::fp8_backward_weight(float*, const T*, const T*, int, int, int,      \
                                                const Fp8Gemm&);
STRATA_INSTANTIATE_FP8(float)
STRATA_INSTANTIATE_FP8(__nv_bfloat16)
STRATA_INSTANTIATE_FP8(__half)
#undef STRATA_INSTANTIATE_FP8

}  // namespace strata::cuda
