// CudaOps<T>'s FP8 GEMMs (cuda_ops.h; docs/ARCHITECTURE.md §6 "FP8"): each operand's amax, its
// reduction over the ranks holding the tensor's other parts (CpuOps::fp8_cast's rules), its scale
// (from the amax, or from the delayed recipe's history the host keeps) and its codes, then
// cuBLASLt's FP8 GEMM on K-major codes. The products' layouts (matmul.h fp8_matmul: a (rows, K)
// and b (cols, K)):
//   forward      out (N, OC)   = input (N, IC) · weight (OC, IC)ᵀ       codes as stored
//   d input      dinp (N, IC)  = grad (N, OC) · weightᵀ (IC, OC)ᵀ       the weight transposed
//   d weight     dW (OC, IC)  += gradᵀ (OC, N) · inputᵀ (IC, N)ᵀ        both transposed
// so a GEMM casts its two operands each time (the weight's codes are not kept between the
// forward and the backward yet). Scales per tensor (tensorwise, delayed), or per row of each
// product's sum (rowwise: each operand's rows as it enters the GEMM, cuBLASLt's outer vectors).
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
void CudaOps<T>::use_fp8(DeviceCollectives* cp, std::size_t sites, std::size_t fused_codes) {
  fp8_cp_ = cp;
  if (sites == 0) return;
  fp8_step_ = DeviceBuffer<float>(sites);
  STRATA_CUDA_CHECK(cudaMemsetAsync(fp8_step_.get(), 0, sites * sizeof(float), ctx_.stream()));
  if (fused_codes == 0) return;
  fp8_fused_codes_ = DeviceBuffer<std::uint8_t>(fused_codes);
  fp8_fused_scales_ = DeviceBuffer<float>(2);
}

// The delayed recipe knows a GEMM's input scale before the values (its history), so the kernel
// that writes the input (a norm, GELU) casts each value as it stores it and joins the step's amax:
// one pass over the activation instead of three (write, amax, cast), with the codes bit for bit
// those fp8_cast would make. The CPU's emulation casts the same stored values in the GEMM. Under
// sequence parallelism a norm's rows are gathered before the GEMM, so they are cast apart.
template <class T>
Fp8CastOutput CudaOps<T>::fused_cast(const Value* out, long n, const Fp8Gemm& next) {
  fp8_fused_.source = nullptr;
  if (!next || fp8_fused_codes_.get() == nullptr) return {};
  const Fp8State& state = *next.state;
  const bool gathered = sequence_parallel_ && next.gemm != Fp8Layer::mlp_proj;
  if (gathered || state.settings().scaling != Fp8Scaling::delayed ||
      !state.runs(next.layer, next.gemm) ||
      !state.has_history(next.layer, next.gemm, Fp8Operand::input) ||
      static_cast<std::size_t>(n) > fp8_fused_codes_.size())
    return {};
  const Fp8Format format = state.format(Fp8Operand::input);
  float* scale = fp8_fused_scales_.get();
  fp8_scale_of(scale, scale + 1, state.history_amax(next.layer, next.gemm, Fp8Operand::input),
               format, ctx_.stream());
  fp8_fused_ = {out, next.layer, next.gemm, n, format};
  return {fp8_fused_codes_.get(), scale,
          fp8_step_.get() + state.site(next.layer, next.gemm, Fp8Operand::input), format};
}

template <class T>
auto CudaOps<T>::fp8_cast(const Value* x, int rows, int cols, const Fp8Gemm& fp8,
                          Fp8Operand operand, bool transpose) -> Fp8Codes {
  if (fp8_fused_.source != nullptr) {  // codes a kernel cast for the next cast, if this is it
    const Fp8FusedCodes fused = fp8_fused_;
    fp8_fused_.source = nullptr;
    if (operand == Fp8Operand::input && !transpose && x == fused.source &&
        fp8.layer == fused.layer && fp8.gemm == fused.gemm &&
        static_cast<long>(rows) * cols == fused.elements)
      return {fp8_fused_codes_.get(), fp8_fused_scales_.get() + 1, fused.format, Fp8Scales::tensor};
  }
  Fp8State& state = *fp8.state;
  const Fp8Scaling scaling = state.settings().scaling;
  const Fp8Format format = state.format(operand);
  const cudaStream_t stream = ctx_.stream();
  // rowwise: one scale per row of the product's sum, x's rows, or its columns when the GEMM takes
  // x transposed (its sum then runs along x's rows): CpuOps::fp8_cast's along_columns.
  const Fp8Axis axis = scaling != Fp8Scaling::rowwise ? Fp8Axis::tensor
                       : transpose                    ? Fp8Axis::columns
                                                      : Fp8Axis::rows;
  const int count = axis == Fp8Axis::tensor ? 1 : axis == Fp8Axis::rows ? rows : cols;
  const auto floats = static_cast<std::size_t>(count);
  float* amax = scratch_.allocate<float>(floats);
  float* scale = scratch_.allocate<float>(floats);
  float* inverse = scratch_.allocate<float>(floats);
  auto* codes = scratch_.allocate<std::uint8_t>(static_cast<std::size_t>(rows) * cols);
  fp8_amaxes(amax, x, rows, cols, axis, stream);
  const bool delayed = scaling == Fp8Scaling::delayed;
  if (delayed) {
    STRATA_CHECK(fp8_step_.get() != nullptr, "the delayed recipe's step amaxes are not kept");
    fp8_keep_largest(fp8_step_.get() + state.site(fp8.layer, fp8.gemm, operand), amax, stream);
  }
  if (delayed && state.has_history(fp8.layer, fp8.gemm, operand)) {
    fp8_scale_of(scale, inverse, state.history_amax(fp8.layer, fp8.gemm, operand), format, stream);
  } else {
    const Fp8AmaxGroups groups = fp8_amax_groups(operand, fp8.row_parallel, axis);
    if (groups.tp && tp_ != nullptr && tp_->size() > 1) tp_->all_reduce_max(amax, floats, stream);
    if (groups.cp && fp8_cp_ != nullptr && fp8_cp_->size() > 1)
      fp8_cp_->all_reduce_max(amax, floats, stream);
    fp8_scales(scale, inverse, amax, count, format, stream);
  }
  cuda::fp8_cast(codes, x, scale, rows, cols, axis, transpose, format, stream);
  return {codes, inverse, format, axis == Fp8Axis::tensor ? Fp8Scales::tensor : Fp8Scales::rows};
}

template <class T>
void CudaOps<T>::fp8_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                             const Value* bias, int N, int IC, int OC, const Fp8Gemm& fp8) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    fail("FP8 GEMMs take bf16 operands (precision.compute: bf16)");
  } else {
    ArenaScope scope(scratch_);
    const Fp8Codes x = fp8_cast(inp, N, IC, fp8, Fp8Operand::input, false);
    const Fp8Codes w = fp8_cast(weight, OC, IC, fp8, Fp8Operand::weight, false);
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
               0.0f, aligned_bias, x.scales);
    if (pre_gelu != nullptr) {  // GELU's output is mlp_proj's input
      const long n = static_cast<long>(N) * OC;
      const Fp8CastOutput cast =
          fused_cast(out, n, {fp8.state, fp8.layer, Fp8Layer::mlp_proj, true});
      if (cast.codes != nullptr)
        gelu_forward_fp8(out, pre_gelu, n, cast, ctx_.stream());
      else
        gelu_forward(out, pre_gelu, n);
    }
  }
}

template <class T>
void CudaOps<T>::fp8_backward_input(Value* dinp, const Value* dout, const Value* weight,
                                    const Value* pre_gelu, int N, int IC, int OC,
                                    const Fp8Gemm& fp8) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    fail("FP8 GEMMs take bf16 operands (precision.compute: bf16)");
  } else {
    ArenaScope scope(scratch_);
    const Fp8Codes dy = fp8_cast(dout, N, OC, fp8, Fp8Operand::grad_output, false);
    const Fp8Codes wt = fp8_cast(weight, OC, IC, fp8, Fp8Operand::weight, true);
    fp8_matmul(ctx_, dinp, dy.codes, dy.format, dy.inverse, wt.codes, wt.format, wt.inverse, N, IC,
               OC, 0.0f, nullptr, dy.scales);
    if (pre_gelu != nullptr) gelu_backward(dinp, pre_gelu, dinp, static_cast<long>(N) * IC);
  }
}

template <class T>
void CudaOps<T>::fp8_backward_weight(Grad* dweight, const Value* dout, const Value* inp, int N,
                                     int IC, int OC, const Fp8Gemm& fp8) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    fail("FP8 GEMMs take bf16 operands (precision.compute: bf16)");
  } else {
    ArenaScope scope(scratch_);
    const Fp8Codes dyt = fp8_cast(dout, N, OC, fp8, Fp8Operand::grad_output, true);
    const Fp8Codes xt = fp8_cast(inp, N, IC, fp8, Fp8Operand::input, true);
    fp8_matmul(ctx_, dweight, dyt.codes, dyt.format, dyt.inverse, xt.codes, xt.format, xt.inverse,
               OC, IC, N, 1.0f, nullptr, dyt.scales);
  }
}

// The members defined here (cuda_ops.cu instantiates the class).
#define STRATA_INSTANTIATE_FP8(T)                                                               \
  template void CudaOps<T>::use_fp8(DeviceCollectives*, std::size_t, std::size_t);              \
  template Fp8CastOutput CudaOps<T>::fused_cast(const T*, long, const Fp8Gemm&);                \
  template auto CudaOps<T>::fp8_cast(const T*, int, int, const Fp8Gemm&, Fp8Operand, bool)      \
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
