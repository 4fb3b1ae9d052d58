// Linear layer: out (N, OC) = inp (N, IC) · weight (OC, IC)ᵀ + bias (OC). Weights are [out, in].
// GEMMs go through the BLAS library of blas.h; the bias is folded in by initialising `out` with it.
#pragma once

namespace strata::cpu {

// bias may be null. out is overwritten.
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC);

// dinp (N, IC) = dout · weight  (overwritten; skipped when dinp is null)
// dweight (OC, IC) += doutᵀ · inp,  dbias (OC) += Σ_n dout   (accumulated: gradient accumulation)
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int IC, int OC);

}  // namespace strata::cpu
