// Linear layers through cuBLASLt (model/kernels/cpu/matmul.h): weights are [out, in], y = x·Wᵀ + b.
// Inputs in the compute dtype T (float, __nv_bfloat16, __half), accumulation in fp32; activations
// and their gradients in T, weight and bias gradients in fp32 (the "main gradient" buffers the
// optimizer reads). Fused epilogues:
//   forward      bias (CUBLASLT_EPILOGUE_BIAS), or bias + GELU storing the pre-activation
//                (CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
//   input grad   × GELU'(pre-activation) of the layer's input (CUBLASLT_EPILOGUE_DGELU)
//   weight grad  the bias gradient from the same pass over dout (CUBLASLT_EPILOGUE_BGRADB)
// When cuBLASLt offers no algorithm for a fused epilogue, or refuses its launch, the plain GEMM
// runs followed by the standalone kernel (gelu.h, residual.h bias_backward). In bf16/fp16 the
// fused epilogue rounds once where the fallback rounds the GEMM output first. cuBLASLt's GELU
// epilogue is the tanh form (as PyTorch's notes on it say), likely with an approximate tanh, so
// the fp32 path, held to 1e-5 of the CPU reference, never fuses GELU (the BGRADB sum is exact
// enough and stays fused); the tests hold bf16/fp16 to the tanh form of cpu/gelu.h.
//
// fp32 GEMMs use exact fp32 (CUBLAS_COMPUTE_32F) unless the context allows TF32.
// Descriptors and the heuristic's choice are cached per shape in the context (matmul_plans.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/fp8.h"

namespace strata::cuda {

// out (N, OC) = inp (N, IC) · weight (OC, IC)ᵀ + bias (OC), overwritten; bias may be null.
// pre_gelu non-null: pre_gelu (N, OC) = inp·Wᵀ + bias and out = gelu(pre_gelu).
template <class T>
void matmul_forward(DeviceContext& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                    const T* bias, int N, int IC, int OC);

// dinp (N, IC) = dout (N, OC) · weight (OC, IC), overwritten.
// pre_gelu non-null: this layer's input was gelu(pre_gelu (N, IC)); then
// dinp = gelu'(pre_gelu) ⊙ (dout · weight), the gradient with respect to pre_gelu.
template <class T>
void matmul_backward_input(DeviceContext& ctx, T* dinp, const T* dout, const T* weight,
                           const T* pre_gelu, int N, int IC, int OC);

// dweight (OC, IC) += doutᵀ · inp and dbias (OC) += Σ_n dout (dbias may be null); both fp32,
// accumulated (gradient accumulation). The bias gradient is computed into OC floats of `arena`
// scratch and added, because the epilogue overwrites.
template <class T>
void matmul_backward_weight(DeviceContext& ctx, float* dweight, float* dbias, const T* dout,
                            const T* inp, int N, int IC, int OC, DeviceArena& arena);

// FP8 GEMM (docs/ARCHITECTURE.md §6 "FP8"; tensor cores of compute capability 8.9 and later):
// d (rows, cols) = β·d + (a (rows, K) · b (cols, K)ᵀ) · a_inverse · b_inverse, with a and b FP8
// codes (kernels/fp8.h) each K-major, the layout of every FP8 kernel of cuBLASLt (its "TN"), and
// the dequantisation factors device floats (fp8_cast.h fp8_scales' inverses). At most one operand
// is e5m2. d in bf16 (β 0) or fp32 (β 0, or 1 to accumulate a weight gradient).
// Accumulation with CUBLASLT_MATMUL_DESC_FAST_ACCUM off: the tensor cores' products of FP8 codes
// are exact, their sums over one instruction's K slice are kept at the tensor cores' own width and
// promoted into fp32 between slices, so |d − the fp32 sum of the dequantized products| stays
// within 2^-12 · Σ_k |a_k·b_k| (tests/cuda/fp8_test.cu); fast accumulation (no promotion) would
// let that error grow with K.
// `bias` (cols, in D; may be null): added to every row in the epilogue (β 0 only), or by a
// kernel after the GEMM where cuBLASLt has no bias epilogue for the scales.
// `scales`: tensor, a_inverse and b_inverse one factor each; rows, one per row of a (`rows`
// floats) and one per row of b (`cols` floats), so d[r][c] is scaled by a_inverse[r] ·
// b_inverse[c] (cuBLASLt's outer-vector scales, the rowwise recipe: Hopper, cuBLAS 12.9 and
// later). Each product stays exact (powers of two), so the bound above holds for both.
enum class Fp8Scales { tensor, rows };
// Whether this build and the cuBLASLt it loaded have outer-vector scales (cuBLAS 12.9 and later;
// the device must still be a Hopper, compute capability 9.0, for cuBLASLt to find an algorithm).
bool fp8_row_scales_available();
template <class D>
void fp8_matmul(DeviceContext& ctx, D* d, const std::uint8_t* a, Fp8Format a_format,
                const float* a_inverse, const std::uint8_t* b, Fp8Format b_format,
                const float* b_inverse, int rows, int cols, int K, float beta,
                const std::type_identity_t<D>* bias = nullptr,
                Fp8Scales scales = Fp8Scales::tensor);

}  // namespace strata::cuda
