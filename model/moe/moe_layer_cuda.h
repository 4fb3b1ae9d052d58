// The mixture-of-experts MLP on a CUDA device: CudaMoeLayer<T> (T = float, __nv_bfloat16, __half)
// is MoeMlp<CudaOps<T>> (model/moe/moe_mlp.h: the function and the passes the CPU's MoeLayer runs
// too, with the same choices, drops, gates and losses, the same gradients up to rounding) owning
// its CudaOps, whose MoE ops (model/moe/cuda_moe_ops.cu) are the kernels of
// model/kernels/cuda/moe.h and the cuBLASLt linear layers of model/kernels/cuda/matmul.h. What is
// CUDA's own is here: the activations' device layout and the bytes a model reserves for them and
// for the kernels' scratch.
//
// Why the routing goes through the host: the capacity rule (GShard claim order, per group) is a
// sequential scan, and every later step needs the per-expert row counts on the host anyway to
// size the per-expert GEMMs. So forward copies the N·k choices (and the router losses' E + 1
// totals) to the host, waits for the stream once (moe_router_to_host), calls the CPU's own
// route_tokens (identical drops on every backend and layout), and copies the kept assignments
// back. That is one stream synchronisation per MoE layer per forward pass; backward_input and
// backward_weight never wait (but for a host-staged tensor-parallel all-reduce of the gates'
// gradient and, under expert parallelism, the exchange below).
//
// Dtypes: T for the weights, x, y, dy, dx and the experts' activations; fp32 for the router
// (probabilities, logsumexps, gates, their gradients and the logits' gradient: CudaOps's Stat,
// where the CPU keeps them in T) and for every parameter gradient. The router weight is held in
// T, like every weight copy; its logits are fp32 sums of products of the T values, not rounded,
// which is what the CPU reference computes for every compute dtype (cpu::matmul_forward on the
// dtype-rounded fp32 values, its output left unrounded). Its weight gradient runs as an exact
// fp32 GEMM (x cast to fp32, TF32 off whatever the context allows) for the same reason. The T
// arrays are rounded where the CPU reference rounds, except that the GELU of the fc GEMM and the
// GELU derivative of the proj input gradient are fused epilogues (in bf16/fp16 one rounding where
// the CPU has two), as in CudaGpt's dense MLP; SwiGLU experts round where the CPU does (the fc
// product, silu(gate)·up and their gradients are separate ops on both). The z-loss is (Σ lse²)/N
// from the device's sums (the CPU adds lse²/N term by term): the metrics read it, no gradient does.
//
// Expert parallelism (model/moe/moe_exchange.h, the CPU's exchange): the exchange is staged
// through the host by the CPU's own code (moe_exchange_rows): the rows travel as raw bytes
// (moe_dispatch<std::uint8_t>, a row C·sizeof(T) bytes), so bf16 and fp16 keep their exact 16 bits
// and no more bytes move than the device holds, where a conversion to fp32 on the host would
// double them and add a rounding step to reason about. Four host waits per MoE layer and
// micro-batch more than at ep 1 (two in forward, two in backward_input).
//
// Memory: a CudaMoeActivations holds one micro-batch's arrays, carved from a DeviceArena for at
// most max_tokens tokens: the origin's arrays (out) for A ≤ max_tokens·k rows, the experts'
// (xe, pre, act, dout, dpre) for R ≤ P·max_tokens·k rows, the dropless worst case of what one
// member can receive (every member's every choice kept and routed to this member's experts; a
// capacity factor bounds it lower, but this bound holds for every routing and capacity setting).
// Kernel scratch comes from the `scratch` arena given at construction and is released before each
// call returns. Everything is queued on the context's compute stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/core/collectives.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/device_collectives.h"
#include "model/kernels/cuda/device_context.h"
#include "model/moe/moe_config.h"
#include "model/moe/moe_exchange.h"
#include "model/moe/moe_layer.h"
#include "model/moe/moe_mlp.h"
#include "model/moe/moe_routing.h"
#include "model/ops/cuda_ops.h"

namespace strata::cuda {

// One micro-batch through one MoE layer (MoeActivations' counterpart): device arrays for at most
// max_tokens tokens, and the host's copy of the routing. Rows of the expert arrays are the kept
// assignments grouped by expert (routing.assignments). The layer's input x is not copied: the
// caller keeps it, unchanged, from forward until backward_weight (the block's LayerNorm output,
// which a CUDA model keeps for its own backward anyway).
template <class T>
struct CudaMoeActivations {
  int max_tokens = 0;
  int tokens = 0;
  const T* x = nullptr;        // (N, C) the caller's input
  float* probs = nullptr;      // (N, E)
  float* lse = nullptr;        // (N)
  float* gates = nullptr;      // (N, k)
  int* choices = nullptr;      // (N, k) experts chosen, best first
  int* row = nullptr;          // (N, k) row of the kept choices, −1 for the dropped
  int* assignments = nullptr;  // (A) routing.assignments
  float* share = nullptr;      // (E) f_e, rounded to fp32 as the CPU's T
  T* out = nullptr;            // (A, C) this rank's assignments' expert outputs
  T* xe = nullptr;             // (R, C) the experts' input rows, expert-major
  T* pre = nullptr;            // (R, Fc) the fc product (Fc = H, or SwiGLU's 2H)
  T* act = nullptr;            // (R, H) its activation
  T* dout = nullptr;           // (R, C) backward_input → backward_weight
  T* dpre = nullptr;           // (R, Fc) backward_input → backward_weight
  float* dlogits = nullptr;    // (N, E) backward_input → backward_weight
  // Host side, filled by forward.
  std::vector<double> chosen_share;  // (E) f_e
  MoeRouting routing;
  MoeExchange exchange;  // which rows go where (R = A, the same order, without a group)
  MoeStats stats;

  // For MoeMlp (moe_mlp_impl.h): the device copy of the kept assignments, and the carved room.
  int* kept_assignments() { return assignments; }
  void check_tokens(int N) const;
  void check_expert_rows(std::size_t R, int members, int k) const;
};

}  // namespace strata::cuda

namespace strata {
template <class T>
struct MoeActivationsFor<cuda::CudaOps<T>> {
  using type = cuda::CudaMoeActivations<T>;
};
extern template class MoeMlp<cuda::CudaOps<float>>;
extern template class MoeMlp<cuda::CudaOps<__nv_bfloat16>>;
extern template class MoeMlp<cuda::CudaOps<__half>>;
}  // namespace strata

namespace strata::cuda {

template <class T>
class CudaMoeLayer : private OwnedMoeOps<CudaOps<T>>, public MoeMlp<CudaOps<T>> {
 public:
  using Activations = CudaMoeActivations<T>;
  // `experts`: every expert's MLP (GptShape::expert_shape). `tp`: the tensor-parallel group's
  // device collectives (null: one rank); H = F / its size. `scratch`: where kernels take
  // temporary arrays (released before each call returns).
  // `ep`: the expert-parallel group (host collectives, not owned; null: one rank, every expert).
  // forward (waits for the stream once: the routing), loss (host values), backward_input and
  // both backward_weight forms (fp32 gradients; the 5-argument one re-points a.x at where the
  // caller keeps the layer's input now) are MoeMlp's (moe_mlp.h).
  CudaMoeLayer(DeviceContext& ctx, DeviceArena& scratch, const MoeExpertShape& experts,
               const MoeConfig& config, DeviceCollectives* tp = nullptr, Collectives* ep = nullptr)
      : OwnedMoeOps<CudaOps<T>>(ctx, scratch, tp, false),
        MoeMlp<CudaOps<T>>(this->owned_ops, experts, config, ep) {}

  // Device bytes of one CudaMoeActivations for max_tokens tokens (each array at the arena's
  // alignment, so a multiple of it).
  std::size_t activation_bytes(int max_tokens) const;
  // The most scratch one call takes for max_tokens tokens.
  std::size_t scratch_bytes(int max_tokens) const;
  // The same two for a layer whose experts (`experts`) are split over tp_size ranks and spread
  // over ep_size, before one exists (a model sizing its reservations at construction).
  static std::size_t activation_bytes(const MoeExpertShape& experts, int tp_size,
                                      const MoeConfig& config, int max_tokens, int ep_size = 1);
  static std::size_t scratch_bytes(const MoeExpertShape& experts, int tp_size,
                                   const MoeConfig& config, int max_tokens, int ep_size = 1);
  // Activations for at most max_tokens tokens, allocated from `arena`.
  CudaMoeActivations<T> activations(DeviceArena& arena, int max_tokens) const;
  // The same laid out from `base`: activation_bytes(max_tokens) device bytes at the arena's
  // alignment that the caller reserved (a block of a model's one activation reservation), in the
  // order the arena would hand them out.
  CudaMoeActivations<T> activations(void* base, int max_tokens) const;
};

// Host bytes an MoE block's activations hold beyond a model's reservation: none, they are carved
// from it (activations(base, max_tokens)).
template <class T>
std::size_t moe_host_bytes(const CudaMoeActivations<T>&) {
  return 0;
}

extern template struct CudaMoeActivations<float>;
extern template struct CudaMoeActivations<__nv_bfloat16>;
extern template struct CudaMoeActivations<__half>;
extern template class CudaMoeLayer<float>;
extern template class CudaMoeLayer<__nv_bfloat16>;
extern template class CudaMoeLayer<__half>;

}  // namespace strata::cuda
