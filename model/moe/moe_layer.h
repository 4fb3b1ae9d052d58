// A mixture-of-experts MLP on the CPU (the reference; model/moe/moe_config.h says what it is):
// for N tokens x (N, C), in sequence order,
//   logits = x · Wrᵀ (E)            p = softmax(logits)           choices, gates: top-k of p
//   routing: capacity per group of whole sequences (model/moe/moe_routing.h)
//   y_t = Σ_j kept(t, j) · gate_tj · MLP_{e_tj}(x_t),  MLP_e(x) = proj_e(gelu(fc_e(x)))
// and the two router losses, over the N tokens:
//   aux = E · Σ_e f_e · P_e   (Switch: f_e the share of the N·k choices that picked e before
//                              capacity, P_e the mean of p_e; gradient through P only)
//   z   = mean_t (log Σ_e exp logits_te)²
// The model adds aux_loss · aux + z_loss · z to its loss (`loss()`), so their gradients are
// scaled like the cross-entropy's. Forward and backward by hand; the per-token arithmetic is
// model/kernels/moe_routing.h, shared with the CUDA kernels.
//
// Weights, as they lie in the block's parameter segment (ParameterLayout): the router (E, C),
// then per expert fc.weight (4C, C), fc.bias (4C), proj.weight (C, 4C), proj.bias (C).
// Gradients lie the same way and are accumulated (+=).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/moe/moe_config.h"
#include "model/moe/moe_routing.h"

namespace strata {

// Where the tensors of an MoE MLP lie from its router's first element.
struct MoeWeightOffsets {
  std::size_t C, E;
  std::size_t router() const { return 0; }
  std::size_t expert(int e) const { return E * C + static_cast<std::size_t>(e) * expert_size(); }
  std::size_t fc_weight(int e) const { return expert(e); }
  std::size_t fc_bias(int e) const { return expert(e) + 4 * C * C; }
  std::size_t proj_weight(int e) const { return fc_bias(e) + 4 * C; }
  std::size_t proj_bias(int e) const { return proj_weight(e) + 4 * C * C; }
  std::size_t expert_size() const { return 8 * C * C + 5 * C; }
  std::size_t total() const { return E * C + E * expert_size(); }
};

// What one forward pass saw, for the metrics (per MoE layer).
struct MoeStats {
  double aux = 0, z = 0;               // the losses, unweighted
  std::int64_t choices = 0;            // N · k
  std::int64_t dropped = 0;            // choices beyond capacity
  std::vector<int> tokens_per_expert;  // kept assignments per expert
};

template <class T>
class MoeLayer {
 public:
  MoeLayer(int d_model, const MoeConfig& config);

  // Forward of x (N, C), N a multiple of the group (group_sequences · seq_len tokens): y (N, C)
  // is overwritten with the experts' weighted outputs (no residual). `weights` points at the
  // router (the layout above). Keeps what backward needs, including a copy of x.
  const MoeStats& forward(const T* x, int N, int seq_len, const T* weights, T* y);
  // aux_loss · aux + z_loss · z of the last forward.
  T loss() const;
  // From dy (N, C), the gradient of y: dx (N, C) overwritten; gradients of every weight (the
  // router's through the gates and both losses, each loss term scaled by loss_scale, as the
  // cross-entropy's gradient is) accumulated into dweights (the layout above).
  void backward(const T* dy, T loss_scale, const T* weights, T* dx, T* dweights);

  const MoeRouting& routing() const { return routing_; }
  const std::vector<T>& probabilities() const { return probs_; }
  const std::vector<T>& gates() const { return gates_; }

 private:
  int C_;
  MoeConfig config_;
  MoeWeightOffsets at_;
  int N_ = 0;
  std::vector<T> x_, logits_, probs_, lse_, gates_;
  std::vector<int> choices_;
  MoeRouting routing_;
  std::vector<int> row_;  // (N·k): the assignment's row in the expert buffers, or -1
  std::vector<T> xe_, pre_, act_, out_;  // per kept assignment, grouped by expert
  std::vector<double> chosen_share_;     // f_e
  MoeStats stats_;
};

extern template class MoeLayer<float>;
extern template class MoeLayer<double>;

}  // namespace strata
