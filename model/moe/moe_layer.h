// A mixture-of-experts MLP on the CPU (the reference; model/moe/moe_config.h says what it is):
// for N tokens x (N, C), in sequence order,
//   logits = x · Wrᵀ (E)            p = softmax(logits)           choices, gates: top-k of p
//   routing: capacity per group of whole sequences (model/moe/moe_routing.h)
//   y_t = Σ_j kept(t, j) · gate_tj · MLP_{e_tj}(x_t),  MLP_e(x) = proj_e(gelu(fc_e(x)))
// and the two router losses, over the N tokens:
//   aux = E · Σ_e f_e · P_e   (Switch: f_e the share of the N·k choices that picked e before
//                              capacity, P_e the mean of p_e; gradient through P only)
//   z   = mean_t (log Σ_e exp logits_te)²
// The model adds aux_loss · aux + z_loss · z to its loss (`loss(a)`), so their gradients are
// scaled like the cross-entropy's. Forward and backward by hand; the per-token arithmetic is
// model/kernels/moe_routing.h, shared with the CUDA kernels.
//
// Tensor parallelism splits every expert as the dense MLP is split (fc by columns, proj by rows:
// H = 4C / tp hidden columns here), so a rank holds its slice of every expert and sees every
// token: the routing needs no exchange (every rank computes it from the same rows and the
// replicated router), y is a partial sum the model sums over the group as it sums the MLP's, and
// each proj bias enters on tp rank 0 only. The one collective is the gates' gradient: a gate
// multiplies the expert's whole output, so dgate = dy · (Σ over ranks of their partial outputs)
// is summed over the group. The input gradient is partial too (the router's part on rank 0), and
// the replicated tensors' gradients (router, proj biases) cover `own` rows (the model's rows
// under sequence parallelism, all of them otherwise), as the dense MLP's bias does.
//
// Expert parallelism (model/moe/moe_exchange.h) splits the experts over an `ep` group: a rank holds
// E/ep of them and computes, for its experts, the rows every member of the group routed there;
// the rows go out after the routing and come back before the combine, the output gradients go
// out and the input gradients come back in backward_input. Routing, losses and the combine stay
// with the tokens' rank, so they are those of one process. Experts held whole or split over tp
// compose: each tensor-parallel rank exchanges with its counterparts (same tp rank) of the other
// members, holding its H columns of the group's experts, so nothing else changes.
//
// Weights, as they lie in the block's parameter segment (ParameterLayout): the router (E, C),
// then per expert held fc.weight (H, C), fc.bias (H), proj.weight (C, H), proj.bias (C).
// Gradients lie the same way and are accumulated (+=). The activations of one micro-batch live in
// a
// MoeActivations the caller keeps (a slot of the model): forward fills it, backward_input
// reads it and leaves the activation gradients backward_weight needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/core/collectives.h"
#include "model/kernels/cpu/precision.h"
#include "model/moe/moe_config.h"
#include "model/moe/moe_exchange.h"
#include "model/moe/moe_routing.h"

namespace strata {

// Where the tensors of an MoE MLP lie from its router's first element (H: hidden columns held;
// `held` experts, E by default; e below counts the experts held).
struct MoeWeightOffsets {
  std::size_t C, E, H, held;
  MoeWeightOffsets(std::size_t C_, std::size_t E_, std::size_t H_, std::size_t held_ = 0)
      : C(C_), E(E_), H(H_), held(held_ == 0 ? E_ : held_) {}
  std::size_t router() const { return 0; }
  std::size_t expert(int e) const { return E * C + static_cast<std::size_t>(e) * expert_size(); }
  std::size_t fc_weight(int e) const { return expert(e); }
  std::size_t fc_bias(int e) const { return expert(e) + H * C; }
  std::size_t proj_weight(int e) const { return fc_bias(e) + H; }
  std::size_t proj_bias(int e) const { return proj_weight(e) + C * H; }
  std::size_t expert_size() const { return 2 * H * C + H + C; }
  std::size_t total() const { return E * C + held * expert_size(); }
};

// What one forward pass saw, for the metrics (per MoE layer).
struct MoeStats {
  double aux = 0, z = 0;               // the losses, unweighted
  std::int64_t choices = 0;            // N · k
  std::int64_t dropped = 0;            // choices beyond capacity
  std::vector<int> tokens_per_expert;  // kept assignments per expert
  // Expert parallelism: rows this rank sent to other members of its group in the forward pass
  // (its tokens to their experts, then their tokens' outputs back).
  std::int64_t exchanged_rows = 0;
};

// A step's routing figures of the MoE blocks, as one flat array the ranks can sum: for each of
// the model's n_layer blocks kFields + experts numbers (zeros for dense blocks and for blocks a
// rank does not hold): the micro-batches counted, the sums of their aux and z losses, their
// choices and dropped choices, then the kept assignments per expert.
struct MoeTotals {
  static constexpr int kFields = 5;
  enum Field { micro_batches, aux, z, choices, dropped };
  static std::size_t stride(int experts) { return kFields + static_cast<std::size_t>(experts); }
  // Adds one micro-batch's stats into block `layer`'s numbers of `totals`.
  static void add(double* totals, int layer, int experts, const MoeStats& stats);
};

// One micro-batch through one MoE layer: what backward needs, and what backward_input leaves for
// backward_weight. This rank's tokens: A kept assignments, rows grouped by expert; its experts:
// R rows, expert-major (model/moe/moe_exchange.h; with one rank in the group R = A, same order).
template <class T>
struct MoeActivations {
  int tokens = 0;
  std::vector<T> x;                  // (N, C) the input
  std::vector<T> probs, lse, gates;  // (N, E), (N), (N, k)
  std::vector<int> choices, row;     // (N, k): experts chosen; row of the kept ones, or -1
  std::vector<double> chosen_share;  // (E) f_e
  MoeRouting routing;
  MoeExchange exchange;
  std::vector<T> out;                  // (A, C) this rank's part of its assignments' outputs
  std::vector<T> xe, pre, act;         // (R, C), (R, H), (R, H) at its experts
  std::vector<T> dout, dpre, dlogits;  // (R, C), (R, H), (N, E): backward_input → _weight
  MoeStats stats;
  std::size_t elements() const;
};

template <class T>
class MoeLayer {
 public:
  using Activations = MoeActivations<T>;
  // `tp`: the tensor-parallel group (null: one rank); H = 4C / its size. `compute`: op outputs
  // and activation gradients are rounded to it as a kernel of that dtype would store them (the
  // router, in fp32 as GPU routers are, is not). `ep`: the expert-parallel group (null: one
  // rank), member m holding experts [m·E/ep, (m+1)·E/ep).
  MoeLayer(int d_model, const MoeConfig& config, Collectives* tp = nullptr,
           cpu::ComputeDtype compute = cpu::ComputeDtype::fp32, Collectives* ep = nullptr);
  MoeLayer(const MoeLayer&) = delete;  // ep_ may point at its own alone_
  MoeLayer& operator=(const MoeLayer&) = delete;

  // Forward of x (N, C), N / seq_len whole sequences (capacity counts groups of group_sequences
  // of them, or all of them when group_sequences does not divide their number): y (N, C)
  // is overwritten with this rank's part of the experts' weighted outputs (no residual).
  // `weights` points at the router (the layout above).
  const MoeStats& forward(MoeActivations<T>& a, const T* x, int N, int seq_len, const T* weights,
                          T* y) const;
  // aux_loss · aux + z_loss · z of a's forward.
  T loss(const MoeActivations<T>& a) const;
  // From dy (N, C), the gradient of the whole y: dx (N, C) overwritten with this rank's part of
  // the input gradient (the router's on rank 0), each loss term's gradient scaled by loss_scale
  // as the cross-entropy's is.
  void backward_input(MoeActivations<T>& a, const T* dy, T loss_scale, const T* weights,
                      T* dx) const;
  // Every weight gradient, accumulated into dweights (the layout above). The replicated ones count
  // each row once over the tensor-parallel group: the router's over this rank's rows
  // [own_begin, own_begin + own_count) (its tokens, or under sequence parallelism its share of
  // them), the experts' proj biases over every row their experts computed on the rank whose
  // own_begin is 0 (every rank without sequence parallelism, tp rank 0 with it: the expert rows
  // came from several ranks' tokens, so no rank can tell its share of them apart).
  void backward_weight(MoeActivations<T>& a, T* dweights, int own_begin, int own_count) const;
  // The same, given the layer's input as the caller keeps it (the block's LayerNorm rows, as
  // CudaMoeLayer takes it): here read from the layer's own copy of it, the same values.
  void backward_weight(MoeActivations<T>& a, const T* /*x*/, T* dweights, int own_begin,
                       int own_count) const {
    backward_weight(a, dweights, own_begin, own_count);
  }

 private:
  void round(T* data, std::size_t n) const;
  int C_, H_;
  MoeConfig config_;
  Collectives* tp_;
  cpu::ComputeDtype compute_;
  SingleRank alone_;
  Collectives* ep_;  // never null (alone_ without expert parallelism)
  MoeWeightOffsets at_;
};

extern template class MoeLayer<float>;
extern template class MoeLayer<double>;
extern template struct MoeActivations<float>;
extern template struct MoeActivations<double>;

}  // namespace strata
