// A mixture-of-experts MLP on a CUDA device: the same function as the CPU reference
// model/moe/moe_layer.h (same choices, same drops, same gates, same losses, the same gradients up
// to rounding), on device pointers, with the kernels of model/kernels/cuda/moe.h and the
// cuBLASLt linear layers of model/kernels/cuda/matmul.h. For N tokens x (N, C):
//   router   logits = x·Wrᵀ (fp32), p = softmax, top-k choices and gates    one warp per token
//   routing  the capacity rule on the host: route_tokens, as the CPU         one host sync
//   gather   xe (A, C): the kept assignments' input rows, grouped by expert
//   experts  per expert with rows: pre = xe·Wfcᵀ + b, act = gelu(pre), out = act·Wprojᵀ + b
//   combine  y_t = Σ_j kept gate_tj · out_{row(t, j)}, in choice order
// and the backward in two halves, as the CPU's: backward_input (dgates, dout = gate·dy, the
// experts' input gradients, the router's gradient with the aux and z-loss terms, dx) and
// backward_weight (every weight gradient, fp32, accumulated).
//
// Why the routing goes through the host: the capacity rule (GShard claim order, per group) is a
// sequential scan, and every later step needs the per-expert row counts on the host anyway to
// size the per-expert GEMMs. So forward copies the N·k choices (and the router losses' E + 1
// totals) to the host, waits for the stream once, calls the CPU's own route_tokens (identical
// drops on every backend and layout), and copies the kept assignments back. That is one stream
// synchronisation per MoE layer per forward pass; backward_input and backward_weight never wait
// (but for a host-staged tensor-parallel all-reduce of the gates' gradient and, under expert
// parallelism, the exchange below).
//
// Dtypes: T (float, __nv_bfloat16, __half) for the weights, x, y, dy, dx and the experts'
// activations; fp32 for the router (probabilities, logsumexps, gates, their gradients and the
// logits' gradient) and for every parameter gradient. The router weight is held in T, like every
// weight copy; its logits are fp32 sums of products of the T values, not rounded, which is what
// the CPU reference computes for every compute dtype (cpu::matmul_forward on the dtype-rounded
// fp32 values, its output left unrounded). Its weight gradient runs as an exact fp32 GEMM (x cast
// to fp32, TF32 off whatever the context allows) for the same reason. The T arrays are rounded
// where the CPU reference rounds, except that the GELU of the fc GEMM and the GELU derivative of
// the proj input gradient are fused epilogues (in bf16/fp16 one rounding where the CPU has two),
// as in CudaGpt's dense MLP.
//
// Tensor parallelism (model/moe/moe_layer.h): H = 4C / tp size hidden columns per expert, the
// proj biases on rank 0, the router's input gradient on rank 0, and the gates' gradient summed
// over the group (`tp`, device collectives; null: one rank).
//
// Weights and gradients lie as the CPU's (MoeWeightOffsets): the router (E, C), then per expert
// held (E/P of them) fc.weight (H, C), fc.bias (H), proj.weight (C, H), proj.bias (C).
//
// Expert parallelism (model/moe/moe_exchange.h, the CPU's exchange): with an `ep` group of P
// members the layer holds E/P experts (member m: [m·E/P, (m+1)·E/P)) and computes, for them, the
// rows every member routed there. The exchange is staged through the host by the CPU's own code:
// after the routing, plan_moe_exchange (one all-to-all of counts); the gathered rows (A, C) go
// device → host, moe_dispatch sends them, the expert-major rows (R, C) come host → device; the
// experts' outputs go back by moe_combine the same way before the gated sum. backward_input moves
// the output gradients out and the experts' input gradients back alike. The rows travel as raw
// bytes (moe_dispatch<std::uint8_t>, a row C·sizeof(T) bytes): bf16 and fp16 keep their exact
// 16 bits and no more bytes move than the device holds, where a conversion to fp32 on the host
// would double them and add a rounding step to reason about. Four host waits per MoE layer and
// micro-batch more than at ep 1 (two in forward, two in backward_input); routing, losses and the
// combine stay with the tokens' rank. With P = 1 (or no group) nothing is staged: the experts
// read the gathered rows where they lie, R = A in the same order.
//
// Memory: a CudaMoeActivations holds one micro-batch's arrays, carved from a DeviceArena for at
// most max_tokens tokens: the origin's arrays (out) for A ≤ max_tokens·k rows, the experts'
// (xe, pre, act, dout, dpre) for R ≤ P·max_tokens·k rows, the dropless worst case of what one
// member can receive (every member's every choice kept and routed to this member's experts; a
// capacity factor bounds it lower, but this bound holds for every routing and capacity setting).
// Kernel scratch comes from the `scratch` arena given at construction and is released before each
// call returns. Everything is queued on the context's compute stream.
//
// Status: compiled, never run on a GPU.
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
#include "model/moe/moe_routing.h"

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
  const T* x = nullptr;              // (N, C) the caller's input
  float* probs = nullptr;            // (N, E)
  float* lse = nullptr;              // (N)
  float* gates = nullptr;            // (N, k)
  int* choices = nullptr;            // (N, k) experts chosen, best first
  int* row = nullptr;                // (N, k) row of the kept choices, −1 for the dropped
  int* assignments = nullptr;        // (A) routing.assignments
  float* chosen_share = nullptr;     // (E) f_e, rounded to fp32 as the CPU's T
  double* router_sums = nullptr;     // (E + 1) Σ_t p_te per expert, Σ_t lse_t²
  T* out = nullptr;                  // (A, C) this rank's assignments' expert outputs
  T* xe = nullptr;                   // (R, C) the experts' input rows, expert-major
  T *pre = nullptr, *act = nullptr;  // (R, H)
  T* dout = nullptr;                 // (R, C) backward_input → backward_weight
  T* dpre = nullptr;                 // (R, H) backward_input → backward_weight
  float* dlogits = nullptr;          // (N, E) backward_input → backward_weight
  // Host side, filled by forward.
  std::vector<int> host_choices;       // (N, k)
  std::vector<double> host_sums;       // (E + 1) router_sums
  std::vector<double> host_share;      // (E) f_e
  std::vector<float> host_share_fp32;  // (E) what chosen_share holds
  MoeRouting routing;
  MoeExchange exchange;  // which rows go where (R = A, the same order, without a group)
  MoeStats stats;
};

template <class T>
class CudaMoeLayer {
 public:
  using Activations = CudaMoeActivations<T>;
  // `tp`: the tensor-parallel group's device collectives (null: one rank); H = 4C / its size.
  // `scratch`: where kernels take temporary arrays (released before each call returns).
  // `ep`: the expert-parallel group (host collectives, not owned; null: one rank, every expert).
  CudaMoeLayer(DeviceContext& ctx, DeviceArena& scratch, int d_model, const MoeConfig& config,
               DeviceCollectives* tp = nullptr, Collectives* ep = nullptr);
  CudaMoeLayer(const CudaMoeLayer&) = delete;  // ep_ may point at its own alone_
  CudaMoeLayer& operator=(const CudaMoeLayer&) = delete;

  int hidden() const { return H_; }
  const MoeWeightOffsets& offsets() const { return at_; }
  // Device bytes of one CudaMoeActivations for max_tokens tokens (each array at the arena's
  // alignment, so a multiple of it).
  std::size_t activation_bytes(int max_tokens) const;
  // The most scratch one call takes for max_tokens tokens.
  std::size_t scratch_bytes(int max_tokens) const;
  // The same two for a layer of d_model channels whose experts are split over tp_size ranks and
  // spread over ep_size, before one exists (a model sizing its reservations at construction).
  static std::size_t activation_bytes(int d_model, int tp_size, const MoeConfig& config,
                                      int max_tokens, int ep_size = 1);
  static std::size_t scratch_bytes(int d_model, int tp_size, const MoeConfig& config,
                                   int max_tokens, int ep_size = 1);
  // Activations for at most max_tokens tokens, allocated from `arena`.
  CudaMoeActivations<T> activations(DeviceArena& arena, int max_tokens) const;
  // The same laid out from `base`: activation_bytes(max_tokens) device bytes at the arena's
  // alignment that the caller reserved (a block of a model's one activation reservation), in the
  // order the arena would hand them out.
  CudaMoeActivations<T> activations(void* base, int max_tokens) const;

  // Forward of x (N, C), N / seq_len whole sequences (capacity groups as the CPU's): y (N, C) is
  // overwritten with this rank's part of the experts' weighted outputs (no residual). `weights`
  // points at the router (the layout above). Waits for the stream once (the routing).
  const MoeStats& forward(CudaMoeActivations<T>& a, const T* x, int N, int seq_len,
                          const T* weights, T* y);
  // aux_loss · aux + z_loss · z of a's forward (host values).
  float loss(const CudaMoeActivations<T>& a) const;
  // From dy (N, C), the gradient of the whole y: dx (N, C) overwritten with this rank's part of
  // the input gradient (the router's on rank 0); the router losses' gradients scaled by
  // loss_scale as the cross-entropy's is.
  void backward_input(CudaMoeActivations<T>& a, const T* dy, float loss_scale, const T* weights,
                      T* dx);
  // Every weight gradient, fp32, accumulated into dweights (the layout above). The replicated
  // ones count each row once over the tensor-parallel group, as the CPU reference's: the router's
  // over the tokens [own_begin, own_begin + own_count), the proj biases' over every expert row on
  // the rank whose own_begin is 0 and nowhere else.
  void backward_weight(CudaMoeActivations<T>& a, float* dweights, int own_begin, int own_count);
  // The same, given where the caller keeps the layer's input x now (the router's gradient reads
  // it): the rows the forward routed, possibly moved since (a split backward's stash copy).
  void backward_weight(CudaMoeActivations<T>& a, const T* x, float* dweights, int own_begin,
                       int own_count) {
    a.x = x;
    backward_weight(a, dweights, own_begin, own_count);
  }

 private:
  bool bias_rank() const { return tp_ == nullptr || tp_->rank() == 0; }
  int tp_size() const { return tp_ != nullptr ? tp_->size() : 1; }
  bool exchanges() const { return ep_->size() > 1; }
  // The host-staged exchange of rows (C·sizeof(T) bytes each) between device arrays: `from`
  // (A rows, the origin's) to `to` (R rows, expert-major) by moe_dispatch, or back by moe_combine.
  // Waits for the stream once.
  void dispatch_rows(const MoeExchange& x, const T* from, T* to);
  void combine_rows(const MoeExchange& x, const T* from, T* to);
  DeviceContext& ctx_;
  DeviceArena& scratch_;
  int C_, H_;
  MoeConfig config_;
  DeviceCollectives* tp_;
  SingleRank alone_;
  Collectives* ep_;  // never null (alone_ without expert parallelism)
  MoeWeightOffsets at_;
  std::vector<std::uint8_t> host_sent_, host_received_;  // the exchange's staging
};

extern template struct CudaMoeActivations<float>;
extern template struct CudaMoeActivations<__nv_bfloat16>;
extern template struct CudaMoeActivations<__half>;
extern template class CudaMoeLayer<float>;
extern template class CudaMoeLayer<__nv_bfloat16>;
extern template class CudaMoeLayer<__half>;

}  // namespace strata::cuda
