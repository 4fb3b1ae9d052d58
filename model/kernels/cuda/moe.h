// The per-token and per-row kernels of a mixture-of-experts MLP on the device (CudaOps's MoE ops,
// model/moe/cuda_moe_ops.cu, launch them; the CPU reference is model/moe/cpu_moe_ops.cpp). The
// router's arithmetic is model/kernels/moe_routing.h, the same functions the CPU reference calls;
// the experts' GEMMs and GELU are matmul.h's. Shapes: N tokens of C channels, E experts, k choices
// per token, A ≤ N·k kept assignments (assignment a = token · k + choice) grouped by expert.
//
// The router runs in fp32 (as the CPU's does, docs/ARCHITECTURE.md §5 "Mixture of experts"): its
// logits are fp32 sums of products of the T inputs, and probabilities, logsumexps, gates, their
// gradients and the logits' gradient stay fp32. Everything a T array receives is computed in fp32
// and rounded once, where the CPU reference rounds (model/kernels/cpu/precision.h).
//
// Every output element has one writer and every sum a fixed order (no atomics): results are
// bitwise reproducible run to run. Combines and input-gradient scatters add a token's experts in
// choice order, as the CPU reference does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace strata::cuda {

// Per token t of x (N, C) with the router weight (E, C), both T: logits (N, E) = x·Wrᵀ in fp32
// (scratch), then moe_softmax, moe_top_k and moe_gates: probs (N, E), lse (N), choices (N, k),
// gates (N, k). One warp per token.
template <class T>
void moe_router_forward(float* probs, float* lse, int* choices, float* gates, float* logits,
                        const T* x, const T* router, int N, int C, int E, int k,
                        cudaStream_t stream);

// sums (E + 1, fp64): Σ_t probs[t, e] for each expert e, then Σ_t lse[t]², the two router losses'
// totals. One block, a fixed order.
void moe_router_sums(double* sums, const float* probs, const float* lse, int N, int E,
                     cudaStream_t stream);

// The experts' input rows: xe (A, C) row r = x row assignments[r] / k, and row[assignments[r]] = r
// (row (N·k): the caller sets it to −1 first, which dropped choices keep).
template <class T>
void moe_gather_rows(T* xe, int* row, const T* x, const int* assignments, int A, int k, int C,
                     cudaStream_t stream);

// y (N, C) = Σ_j gates[t, j] · out[row[t, j], :] over the kept choices j (row ≥ 0) in choice order,
// in fp32, rounded once; a token with every choice dropped gets a zero row.
template <class T>
void moe_combine_rows(T* y, const T* out, const float* gates, const int* row, int N, int k, int C,
                      cudaStream_t stream);

// For each kept row r (assignment a = assignments[r], token t = a / k):
//   dgates[a] = Σ_c dy[t, c] · out[r, c] (fp32)      dout[r, :] = gates[a] · dy[t, :] (T)
// dgates of dropped choices are left as they are (the caller zeroes them). One warp per row.
template <class T>
void moe_gate_grads(float* dgates, T* dout, const T* dy, const T* out, const float* gates,
                    const int* assignments, int A, int k, int C, cudaStream_t stream);

// Per token: dlogits (N, E) = moe_router_backward (model/kernels/moe_routing.h) from probs, lse,
// choices, gates, dgates and chosen_share (E, the f_e); dp (N, E) is scratch.
void moe_router_grads(float* dlogits, float* dp, const float* probs, const float* lse,
                      const int* choices, const float* gates, const float* dgates,
                      const float* chosen_share, float aux_scale, float z_scale, int N, int E,
                      int k, cudaStream_t stream);

// dx (N, C) = dlogits (N, E) · router (E, C) (left out when router is null: the router's input
// gradient is tensor-parallel rank 0's) + Σ_j dxe[row[t, j], :] over the kept choices in choice
// order, in fp32, rounded once.
template <class T>
void moe_input_grads(T* dx, const float* dlogits, const T* router, const T* dxe, const int* row,
                     int N, int k, int E, int C, cudaStream_t stream);

}  // namespace strata::cuda
