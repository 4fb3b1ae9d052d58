// The mixture-of-experts MLP on the CPU (the reference): MoeLayer<T> (T = float, or double for
// the finite-difference tests) is MoeMlp<CpuOps<T>> (model/moe/moe_mlp.h: the function, the
// passes, tensor and expert parallelism, the weights' layout) owning its CpuOps, whose MoE ops are
// the CPU loops (model/moe/cpu_moe_ops.cpp). What is the CPU's own: its activations are host
// vectors grown to the largest micro-batch a slot has seen, with a copy of the layer's input; the
// router's probabilities, logsumexps and gates, the gates' and logits' gradients are in T; op
// outputs and activation gradients are rounded to the compute dtype as a kernel of that dtype
// would store them (the router's logits, in fp32 as GPU routers are, are not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/core/collectives.h"
#include "model/kernels/cpu/precision.h"
#include "model/moe/moe_config.h"
#include "model/moe/moe_exchange.h"
#include "model/moe/moe_mlp.h"
#include "model/moe/moe_routing.h"
#include "model/ops/cpu_ops.h"

namespace strata {

// One micro-batch through one MoE layer: what backward needs, and what backward_input leaves for
// backward_weight (moe_mlp_impl.h's arrays, host vectors here). This rank's tokens: A kept
// assignments, rows grouped by expert; its experts: R rows, expert-major
// (model/moe/moe_exchange.h; with one rank in the group R = A, same order).
template <class T>
struct MoeActivations {
  int tokens = 0;
  std::vector<T> x;                  // (N, C) the input (a copy)
  std::vector<T> probs, lse, gates;  // (N, E), (N), (N, k)
  std::vector<int> choices, row;     // (N, k): experts chosen; row of the kept ones, or -1
  std::vector<double> chosen_share;  // (E) f_e
  std::vector<T> share;              // (E) f_e in T, as the router's backward reads it
  MoeRouting routing;
  MoeExchange exchange;
  std::vector<T> out;                  // (A, C) this rank's part of its assignments' outputs
  std::vector<T> xe, pre, act;         // (R, C), (R, Fc), (R, H) at its experts (Fc: H or 2H)
  std::vector<T> dout, dpre, dlogits;  // (R, C), (R, Fc), (N, E): backward_input → _weight
  MoeStats stats;
  std::size_t elements() const;
  // The kept assignments are the routing's own (no copy on the host); vectors grow, so any
  // number of tokens and expert rows fits.
  int* kept_assignments() { return routing.assignments.data(); }
  void check_tokens(int) const {}
  void check_expert_rows(std::size_t, int, int) const {}
};

template <class T>
struct MoeActivationsFor<CpuOps<T>> {
  using type = MoeActivations<T>;
};

template <class T>
class MoeLayer : private OwnedMoeOps<CpuOps<T>>, public MoeMlp<CpuOps<T>> {
 public:
  using Activations = MoeActivations<T>;
  // `experts`: every expert's MLP (GptShape::expert_shape). `tp`: the tensor-parallel group
  // (null: one rank); H = F / its size. `compute`: op outputs and activation gradients are
  // rounded to it. `ep`: the expert-parallel group (null: one rank), member m holding experts
  // [m·E/ep, (m+1)·E/ep). forward, loss, backward_input and both backward_weight forms are
  // MoeMlp's (moe_mlp.h).
  MoeLayer(const MoeExpertShape& experts, const MoeConfig& config, Collectives* tp = nullptr,
           cpu::ComputeDtype compute = cpu::ComputeDtype::fp32, Collectives* ep = nullptr)
      : OwnedMoeOps<CpuOps<T>>(compute, tp, false),
        MoeMlp<CpuOps<T>>(this->owned_ops, experts, config, ep) {}

  // The activations keep their arrays themselves, growing at their first forward: a model
  // reserves nothing for them (CudaMoeLayer's carve into a model's reservation instead).
  static std::size_t activation_bytes(const MoeExpertShape& /*experts*/, int /*tp_size*/,
                                      const MoeConfig& /*config*/, int /*max_tokens*/,
                                      int /*ep_size*/ = 1) {
    return 0;
  }
  Activations activations(void* /*base*/, int /*max_tokens*/) const { return {}; }
};

// Host bytes an MoE block's activations hold beyond a model's reservation: all of them here.
template <class T>
std::size_t moe_host_bytes(const MoeActivations<T>& a) {
  return a.elements() * sizeof(T);
}

extern template class MoeMlp<CpuOps<float>>;
extern template class MoeMlp<CpuOps<double>>;
extern template class MoeLayer<float>;
extern template class MoeLayer<double>;
extern template struct MoeActivations<float>;
extern template struct MoeActivations<double>;

}  // namespace strata
