// A mixture-of-experts MLP, written once for both backends over an ops object (MoeMlp<Ops>: Ops =
// CpuOps<T>, model/ops/cpu_ops.h, or CudaOps<T>, model/ops/cuda_ops.h; model/moe/moe_config.h says
// what it is). For N tokens x (N, C), in sequence order,
//   logits = x · Wrᵀ (E)            p = softmax(logits)           choices, gates: top-k of p
//   routing: capacity per group of whole sequences (model/moe/moe_routing.h), on the host
//   y_t = Σ_j kept(t, j) · gate_tj · MLP_{e_tj}(x_t),  MLP_e(x) = proj_e(gelu(fc_e(x))), or with
//   SwiGLU experts proj_e(silu(gate) · up), [gate | up] = fc_e(x)
// and the two router losses, over the N tokens:
//   aux = E · Σ_e f_e · P_e   (Switch: f_e the share of the N·k choices that picked e before
//                              capacity, P_e the mean of p_e; gradient through P only)
//   z   = mean_t (log Σ_e exp logits_te)²
// The model adds aux_loss · aux + z_loss · z to its loss (`loss(a)`), so their gradients are
// scaled like the cross-entropy's. Forward and backward by hand, each step an MoE op of the ops
// object (model/ops/ops.h lists them: moe_router_forward … moe_router_weight_grad); the per-token
// arithmetic is model/kernels/moe_routing.h, shared by both backends' ops.
//
// forward: router → the router's results to the host (CUDA: the layer's one stream wait) →
// route_tokens, chosen_shares, the losses and stats (host code, the same on both) → the kept
// assignments and f_e to the device → plan_moe_exchange → gather the kept rows (straight into the
// experts' rows, or, under expert parallelism, into scratch and dispatched) → per expert held
// fc with GELU (Epilogue::gelu), or fc (Epilogue::bias) then swiglu_forward, and proj
// (Epilogue::bias, the bias on tensor-parallel rank 0) → under expert parallelism the outputs
// combined home → the gated sum in choice order. backward_input: the gates' gradients and the
// experts' output gradients (summed over tp) → the experts' input gradients (GELU' through
// matmul_backward_input, or proj's input gradient then swiglu_backward, as the dense block) → the
// router's gradient with the aux and z-loss terms → dx. backward_weight: the experts' weight
// gradients and the router's.
//
// The experts are the model's MLP (MoeExpertShape, model/moe/moe_config.h): GELU of width F or
// SwiGLU, with biases or none (model.bias false: null bias pointers in every op).
//
// Tensor parallelism splits every expert as the dense MLP is split (fc by columns, proj by rows:
// H = F / tp hidden columns here; SwiGLU's fc a rank's [gate | up] rows, 2H of them), so a rank
// holds its slice of every expert and sees every token: the routing needs no exchange (every rank
// computes it from the same rows and the replicated router), y is a partial sum the model sums
// over the group as it sums the MLP's, and each proj bias enters on tp rank 0 only. The one
// collective is the gates' gradient: a gate multiplies the expert's whole output, so dgate = dy ·
// (Σ over ranks of their partial outputs) is summed over the group (inside moe_gate_grads). The
// input gradient is partial too (the router's part on rank 0), and the replicated tensors'
// gradients (router, proj biases) cover `own` rows (the model's rows under sequence parallelism,
// all of them otherwise), as the dense MLP's bias does.
//
// Expert parallelism (model/moe/moe_exchange.h) splits the experts over an `ep` group: a rank holds
// E/ep of them and computes, for its experts, the rows every member of the group routed there;
// the rows go out after the routing and come back before the combine, the output gradients go
// out and the input gradients come back in backward_input. Routing, losses and the combine stay
// with the tokens' rank, so they are those of one process. Experts held whole or split over tp
// compose: each tensor-parallel rank exchanges with its counterparts (same tp rank) of the other
// members, holding its H columns of the group's experts. Without a group (or a group of one) the
// experts read the gathered rows where they lie: R = A, the same order.
//
// Weights, as they lie in the block's parameter segment (ParameterLayout): the router (E, C),
// then per expert held fc.weight (Fc, C), fc.bias (Fc), proj.weight (C, H), proj.bias (C), with
// Fc = H, or SwiGLU's 2H, and no bias tensors in a model without biases (MoeWeightOffsets).
// Gradients lie the same way and are accumulated (+=). One micro-batch's activations live in a
// MoeActivationsOf<Ops> the caller keeps (a slot of the model): forward fills it, backward_input
// reads it and leaves the activation gradients backward_weight needs. The two backends keep two
// activation structs (MoeActivations<T>: host vectors grown to the largest micro-batch, with a
// copy of x; CudaMoeActivations<T>: device arrays carved once for the dropless worst case, x the
// caller's): the arrays are the same, only their ownership differs, and merging them would move
// the CUDA carving into host code that cannot use it. The helpers below reach either alike.
//
// Temporaries come from ops.moe_scratch() (CPU: host arrays; CUDA: the kernels' scratch arena),
// in the order CudaMoeLayer's scratch_bytes counts them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/core/collectives.h"
#include "model/moe/moe_config.h"
#include "model/moe/moe_exchange.h"
#include "model/moe/moe_routing.h"
#include "model/ops/ops.h"

namespace strata {

// Where the tensors of an MoE MLP lie from its router's first element (H: hidden columns held;
// `held` experts, E by default; e below counts the experts held; `swiglu`: fc is the gate and up
// projections, Fc = 2H rows, else Fc = H). Without biases (`bias` false: model.bias) the two bias
// tensors are absent: has_bias says so, and fc_bias(e), proj_bias(e) then name where they would
// start, the next tensor's first element, which nothing reads (MoeMlp passes null instead).
struct MoeWeightOffsets {
  std::size_t C, E, H, held, Fc;
  bool has_bias;
  MoeWeightOffsets(std::size_t C_, std::size_t E_, std::size_t H_, std::size_t held_ = 0,
                   bool swiglu = false, bool bias = true)
      : C(C_),
        E(E_),
        H(H_),
        held(held_ == 0 ? E_ : held_),
        Fc(swiglu ? 2 * H_ : H_),
        has_bias(bias) {}
  // The experts of `shape` split over tp_size ranks, E of them, `held_` held (0: all).
  static MoeWeightOffsets of(const MoeExpertShape& shape, int tp_size, int E_, int held_ = 0) {
    return MoeWeightOffsets(static_cast<std::size_t>(shape.d_model), static_cast<std::size_t>(E_),
                            static_cast<std::size_t>(shape.ffn_width / tp_size),
                            static_cast<std::size_t>(held_), shape.swiglu, shape.bias);
  }
  std::size_t router() const { return 0; }
  std::size_t expert(int e) const { return E * C + static_cast<std::size_t>(e) * expert_size(); }
  std::size_t fc_weight(int e) const { return expert(e); }
  std::size_t fc_bias(int e) const { return expert(e) + Fc * C; }
  std::size_t proj_weight(int e) const { return fc_bias(e) + biases(Fc); }
  std::size_t proj_bias(int e) const { return proj_weight(e) + C * H; }
  std::size_t expert_size() const { return Fc * C + C * H + biases(Fc + C); }
  std::size_t total() const { return E * C + held * expert_size(); }

 private:
  std::size_t biases(std::size_t n) const { return has_bias ? n : 0; }
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

// The activation struct of a backend's ops (specialised beside each: moe_layer.h for CpuOps<T>,
// moe_layer_cuda.h for CudaOps<T>).
template <class Ops>
struct MoeActivationsFor;
template <class Ops>
using MoeActivationsOf = typename MoeActivationsFor<Ops>::type;

// An array of an activation struct, whichever way it is kept: a host vector grows (never
// shrinks: a slot keeps its largest micro-batch's) to n elements; a device array was carved for
// the worst case and is returned as it is.
template <class U>
U* moe_fit(std::vector<U>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
template <class U>
U* moe_fit(U* p, std::size_t) {
  return p;
}
template <class U>
const U* moe_array(const std::vector<U>& v) {
  return v.data();
}
template <class U>
const U* moe_array(const U* p) {
  return p;
}
// The layer's input x, kept for the router's weight gradient. CPU: a copy (the layer owns its
// activations; tests/unit/plan_moe_test.cpp counts it); CUDA: the caller's rows (a model keeps
// them for its own backward), re-pointed when the caller moved them (moe_rebind_input).
template <class U>
void moe_keep_input(std::vector<U>& kept, const U* x, std::size_t n) {
  kept.assign(x, x + n);
}
template <class U>
void moe_keep_input(const U*& kept, const U* x, std::size_t) {
  kept = x;
}
template <class U>
void moe_rebind_input(std::vector<U>&, const U*) {}  // its own copy holds the same values
template <class U>
void moe_rebind_input(const U*& kept, const U* x) {
  kept = x;
}

template <class Ops>
class MoeMlp {
 public:
  using Value = typename Ops::Value;
  using Grad = typename Ops::Grad;
  using Stat = typename Ops::Stat;
  using Scalar = typename Ops::Scalar;
  using Activations = MoeActivationsOf<Ops>;

  // `ops`: the backend's ops (not owned), whose tensor-parallel group splits the experts (H = F /
  // its size). `experts`: every expert's MLP. `ep`: the expert-parallel group (null: one rank),
  // member m holding experts [m·E/ep, (m+1)·E/ep).
  MoeMlp(Ops& ops, const MoeExpertShape& experts, const MoeConfig& config, Collectives* ep);
  MoeMlp(const MoeMlp&) = delete;  // ep_ may point at its own alone_
  MoeMlp& operator=(const MoeMlp&) = delete;

  int d_model() const { return C_; }
  int hidden() const { return H_; }  // H = F / tp
  const MoeExpertShape& expert_shape() const { return shape_; }
  const MoeConfig& config() const { return config_; }
  const MoeWeightOffsets& offsets() const { return at_; }
  int tp_size() const { return shape_.ffn_width / H_; }
  int expert_members() const { return ep_->size(); }

  // Forward of x (N, C), N / seq_len whole sequences (capacity counts groups of group_sequences
  // of them, or all of them when group_sequences does not divide their number): y (N, C)
  // is overwritten with this rank's part of the experts' weighted outputs (no residual).
  // `weights` points at the router (the layout above).
  const MoeStats& forward(Activations& a, const Value* x, int N, int seq_len, const Value* weights,
                          Value* y) const;
  // aux_loss · aux + z_loss · z of a's forward (host values).
  Scalar loss(const Activations& a) const;
  // From dy (N, C), the gradient of the whole y: dx (N, C) overwritten with this rank's part of
  // the input gradient (the router's on rank 0), each loss term's gradient scaled by loss_scale
  // as the cross-entropy's is.
  void backward_input(Activations& a, const Value* dy, Scalar loss_scale, const Value* weights,
                      Value* dx) const;
  // Every weight gradient, accumulated into dweights (the layout above). The replicated ones count
  // each row once over the tensor-parallel group: the router's over this rank's rows
  // [own_begin, own_begin + own_count) (its tokens, or under sequence parallelism its share of
  // them), the experts' proj biases over every row their experts computed on the rank whose
  // own_begin is 0 (every rank without sequence parallelism, tp rank 0 with it: the expert rows
  // came from several ranks' tokens, so no rank can tell its share of them apart).
  void backward_weight(Activations& a, Grad* dweights, int own_begin, int own_count) const;
  // The same, given where the caller keeps the layer's input x now (a split backward's stash
  // copy: the rows the forward routed): CUDA reads it; the CPU reads its own copy, the same values.
  void backward_weight(Activations& a, const Value* x, Grad* dweights, int own_begin,
                       int own_count) const {
    moe_rebind_input(a.x, x);
    backward_weight(a, dweights, own_begin, own_count);
  }

 private:
  bool bias_rank() const { return ops_.tp_rank() == 0; }
  bool exchanges() const { return ep_->size() > 1; }
  // A bias tensor at `offset` of `base`, or null where the experts have none.
  template <class P>
  P* bias_at(P* base, std::size_t offset) const {
    return at_.has_bias ? base + offset : nullptr;
  }

  Ops& ops_;
  MoeExpertShape shape_;
  int C_, H_, Fc_;  // channels, hidden columns held, rows of the fc product held (H or 2H)
  MoeConfig config_;
  SingleRank alone_;
  Collectives* ep_;  // never null (alone_ without expert parallelism)
  MoeWeightOffsets at_;
};

// Base-from-member: a wrapper layer (MoeLayer<T>, CudaMoeLayer<T>) owns its ops object, built
// before the MoeMlp base that reaches it.
template <class Ops>
struct OwnedMoeOps {
  template <class... Args>
  explicit OwnedMoeOps(Args&&... args) : owned_ops(std::forward<Args>(args)...) {}
  Ops owned_ops;
};

// The one way both backends instantiate the layer (moe_layer.cpp, moe_layer_cuda.cu), in
// namespace strata after including model/moe/moe_mlp_impl.h: the ops checked against
// model/ops/ops.h, then MoeMlp.
#define STRATA_INSTANTIATE_MOE_MLP(Ops) \
  STRATA_CHECK_GPT_OPS(Ops);            \
  template class MoeMlp<Ops>;

}  // namespace strata
