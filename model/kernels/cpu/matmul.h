// Linear layer: out (N, OC) = inp (N, IC) · weight (OC, IC)ᵀ + bias (OC). Weights are [out, in].
// GEMMs go through the BLAS library of blas.h; the bias is folded in by initialising `out` with it.
#pragma once

namespace strata::cpu {

// bias may be null. out is overwritten.
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC);

// dinp (N, IC) = dout · weight  (overwritten; skipped when dinp is null)
// dweight (OC, IC) += doutᵀ · inp,  dbias (OC) += Σ_n dout   (accumulated: gradient accumulation)
// Exactly matmul_backward_input, then matmul_backward_weight.
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int IC, int OC);

// The two halves of matmul_backward, for a backward split into the input gradient (what the
// previous layer waits for) and the weight gradient (which may run later; docs/ARCHITECTURE.md
// §5, the split backward). dbias may be null.
template <class T>
void matmul_backward_input(T* dinp, const T* dout, const T* weight, int N, int IC, int OC);
template <class T>
void matmul_backward_weight(T* dweight, T* dbias, const T* dout, const T* inp, int N, int IC,
                            int OC);

}  // namespace strata::cpu
