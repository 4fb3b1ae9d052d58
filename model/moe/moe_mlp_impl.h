// MoeMlp<Ops>'s passes (moe_mlp.h), included by the files that instantiate it (moe_layer.cpp for
// CpuOps, moe_layer_cuda.cu for CudaOps) through STRATA_INSTANTIATE_MOE_MLP. Each step is one op
// of model/ops/ops.h; what is here besides is host code both backends run alike (the capacity
// rule, the losses and stats from the router's sums, the exchange plan, the scales).
//
// An activation struct (MoeActivationsOf<Ops>) has the arrays named below (host vectors or device
// pointers, reached through moe_fit/moe_array), the host's routing, exchange, chosen_share and
// stats, and three members: kept_assignments() (the kept assignments as the ops read them),
// check_tokens(N) and check_expert_rows(R, members, k) (a carved struct's room; nothing for one
// that grows).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "model/core/error.h"
#include "model/moe/moe_mlp.h"

namespace strata {

template <class Ops>
MoeMlp<Ops>::MoeMlp(Ops& ops, const MoeExpertShape& experts, const MoeConfig& config,
                    Collectives* ep)
    : ops_(ops),
      shape_(experts),
      C_(experts.d_model),
      H_(experts.ffn_width / ops.tp_size()),
      Fc_(experts.fc_width() / ops.tp_size()),
      config_(config),
      ep_(ep != nullptr ? ep : &alone_),
      at_(MoeWeightOffsets::of(experts, ops.tp_size(), config.experts,
                               config.experts / ep_->size())) {
  STRATA_CHECK(config.experts >= 1 && config.top_k >= 1 && config.top_k <= config.experts,
               "MoE layer: top_k ", config.top_k, " of ", config.experts, " experts");
  STRATA_CHECK(
      experts.d_model >= 1 && experts.ffn_width >= 1 && experts.ffn_width % ops.tp_size() == 0,
      "MoE layer: tensor parallelism of ", ops.tp_size(), " does not split ", experts.ffn_width,
      " hidden columns");
  STRATA_CHECK(config.experts % ep_->size() == 0, "expert parallelism of ", ep_->size(),
               " does not divide ", config.experts, " experts");
}

template <class Ops>
const MoeStats& MoeMlp<Ops>::forward(Activations& a, const Value* x, int N, int seq_len,
                                     const Value* weights, Value* y) const {
  const int E = config_.experts, k = config_.top_k, C = C_, H = H_, Fc = Fc_;
  const std::size_t n = static_cast<std::size_t>(N);
  a.check_tokens(N);
  a.tokens = N;
  moe_keep_input(a.x, x, n * C);
  Stat* probs = moe_fit(a.probs, n * E);
  Stat* lse = moe_fit(a.lse, n);
  int* choices = moe_fit(a.choices, n * k);
  Stat* gates = moe_fit(a.gates, n * k);
  // Router: logits, probabilities, choices and gates per token; then what the host needs.
  ops_.moe_router_forward(probs, lse, choices, gates, x, weights + at_.router(), N, C, E, k);
  const MoeRouterHost host = ops_.moe_router_to_host(choices, probs, lse, N, E, k);
  // Capacity in groups of group_sequences sequences; a micro-batch they do not divide (an
  // evaluation's last) is one group. Identical drops on every backend and layout.
  const int group = capacity_group_tokens(N, seq_len, config_.group_sequences);
  a.routing = route_tokens(host.choices, N, k, E, group, config_.capacity(group));
  // The losses: f_e from the choices before capacity, P_e the mean probability.
  a.chosen_share = chosen_shares(host.choices, N, k, E);
  MoeStats& stats = a.stats;
  stats = MoeStats{};
  for (int e = 0; e < E; ++e) {
    const std::size_t ue = static_cast<std::size_t>(e);
    stats.aux += E * a.chosen_share[ue] * host.prob_sums[ue] / N;
  }
  stats.z = host.z;
  stats.choices = static_cast<std::int64_t>(N) * k;
  stats.dropped = a.routing.dropped();
  for (int e = 0; e < E; ++e) stats.tokens_per_expert.push_back(a.routing.assigned(e));
  const std::size_t A = a.routing.assignments.size();
  int* kept = a.kept_assignments();
  ops_.moe_routing_to_device(kept, moe_fit(a.share, static_cast<std::size_t>(E)), a.routing,
                             a.chosen_share);
  // The assignments' rows (grouped by expert, in token order) go to their experts' members
  // (counts first); without expert parallelism they are the experts' rows, in place.
  a.exchange = plan_moe_exchange(a.routing, *ep_);
  const std::size_t R = static_cast<std::size_t>(a.exchange.received());
  a.check_expert_rows(R, ep_->size(), k);
  int* row = moe_fit(a.row, n * k);
  Value* xe = moe_fit(a.xe, R * C);
  if (!exchanges()) {
    ops_.moe_gather_rows(xe, row, x, kept, static_cast<int>(A), N, k, C);
  } else {
    auto scratch = ops_.moe_scratch();
    Value* rows = scratch.template take<Value>(std::max<std::size_t>(A, 1) * C);
    ops_.moe_gather_rows(rows, row, x, kept, static_cast<int>(A), N, k, C);
    ops_.moe_exchange_rows(RowExchange::dispatch, a.exchange, *ep_, rows, xe, C);
  }
  // The experts held, each on its rows: pre (R, Fc) the fc product, act (R, H) its activation.
  Value* pre = moe_fit(a.pre, R * Fc);
  Value* act = moe_fit(a.act, R * H);
  Value* home = moe_fit(a.out, A * C);
  auto scratch = ops_.moe_scratch();
  Value* out = exchanges() ? scratch.template take<Value>(std::max<std::size_t>(R, 1) * C) : home;
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    const Value* fc_bias = bias_at(weights, at_.fc_bias(j));
    if (shape_.swiglu) {
      // [gate | up] with the fc bias, then silu(gate)·up, as the dense block's SwiGLU.
      ops_.matmul_forward(pre + first * Fc, static_cast<Value*>(nullptr), xe + first * C,
                          weights + at_.fc_weight(j), fc_bias, rows, C, Fc, Epilogue::bias,
                          Fp8Gemm{});
      ops_.swiglu_forward(act + first * H, pre + first * Fc, rows, H);
    } else {
      // The fc bias inside the product (Epilogue::gelu: the CPU rounds the product with its
      // bias, then the GELU; the dense MLP's bias_gelu adds it after the product).
      ops_.matmul_forward(act + first * H, pre + first * H, xe + first * C,
                          weights + at_.fc_weight(j), fc_bias, rows, C, H, Epilogue::gelu,
                          Fp8Gemm{});
    }
    ops_.matmul_forward(
        out + first * C, static_cast<Value*>(nullptr), act + first * H,
        weights + at_.proj_weight(j),
        bias_rank() ? bias_at(weights, at_.proj_bias(j)) : static_cast<const Value*>(nullptr), rows,
        H, C, Epilogue::bias, Fp8Gemm{});
  }
  // The outputs come home, in the order their rows left.
  if (exchanges()) ops_.moe_exchange_rows(RowExchange::combine, a.exchange, *ep_, out, home, C);
  stats.exchanged_rows = static_cast<std::int64_t>(a.exchange.rows_to_others(ep_->rank()) +
                                                   a.exchange.rows_from_others(ep_->rank()));
  // Each token's experts added in choice order (the same order on any layout).
  ops_.moe_combine_rows(y, home, gates, row, N, k, C);
  return stats;
}

template <class Ops>
auto MoeMlp<Ops>::loss(const Activations& a) const -> Scalar {
  return static_cast<Scalar>(config_.aux_loss * a.stats.aux + config_.z_loss * a.stats.z);
}

template <class Ops>
void MoeMlp<Ops>::backward_input(Activations& a, const Value* dy, Scalar loss_scale,
                                 const Value* weights, Value* dx) const {
  const int E = config_.experts, k = config_.top_k, C = C_, H = H_, Fc = Fc_, N = a.tokens;
  const std::size_t n = static_cast<std::size_t>(N), A = a.routing.assignments.size();
  const std::size_t R = static_cast<std::size_t>(a.exchange.received());
  auto scratch = ops_.moe_scratch();
  // Gates and expert outputs: dgate = dy_t · (the whole expert output), dout = gate · dy_t; a
  // dropped choice's dgate is 0. The origin's dout (A, C): the experts' own array without expert
  // parallelism, else staged and dispatched to the experts' members as the rows were.
  Stat* dgates = scratch.template take<Stat>(n * k);
  ops_.zero(dgates, n * k);
  Value* dout_experts = moe_fit(a.dout, R * C);
  Value* dout =
      exchanges() ? scratch.template take<Value>(std::max<std::size_t>(A, 1) * C) : dout_experts;
  const int* kept = a.kept_assignments();
  const Stat* gates = moe_array(a.gates);
  ops_.moe_gate_grads(dgates, dout, dy, moe_array(a.out), gates, kept, static_cast<int>(A), N, k,
                      C);
  if (exchanges())
    ops_.moe_exchange_rows(RowExchange::dispatch, a.exchange, *ep_, dout, dout_experts, C);
  // The experts' input gradients: dpre (R, Fc) of the fc product. GELU's derivative through the
  // proj's input gradient; SwiGLU's from the proj's input gradient dact (R, H), as the dense block.
  Value* dpre = moe_fit(a.dpre, R * Fc);
  const Value* pre = moe_array(a.pre);
  Value* dxe = R > 0 ? scratch.template take<Value>(R * C) : nullptr;
  Value* dact = shape_.swiglu && R > 0 ? scratch.template take<Value>(R * H) : nullptr;
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    if (shape_.swiglu) {
      ops_.matmul_backward_input(dact + first * H, dout_experts + first * C,
                                 weights + at_.proj_weight(j), static_cast<const Value*>(nullptr),
                                 rows, H, C, Fp8Gemm{});
      ops_.swiglu_backward(dpre + first * Fc, dact + first * H, pre + first * Fc, rows, H);
    } else {
      ops_.matmul_backward_input(dpre + first * H, dout_experts + first * C,
                                 weights + at_.proj_weight(j), pre + first * H, rows, H, C,
                                 Fp8Gemm{});
    }
    ops_.matmul_backward_input(dxe + first * C, dpre + first * Fc, weights + at_.fc_weight(j),
                               static_cast<const Value*>(nullptr), rows, C, Fc, Fp8Gemm{});
  }
  // The input gradients come home (A, C), in the order their rows left.
  const Value* dinput = dxe;
  if (exchanges()) {
    Value* home = scratch.template take<Value>(std::max<std::size_t>(A, 1) * C);
    ops_.moe_exchange_rows(RowExchange::combine, a.exchange, *ep_, dxe, home, C);
    dinput = home;
  }
  // The router: the gates' gradient, the aux loss's (through P_e) and the z-loss's, the scales
  // computed in double from the loss scale and rounded to Stat.
  const Stat aux_scale = static_cast<Stat>(loss_scale * config_.aux_loss * E / N);
  const Stat z_scale = static_cast<Stat>(loss_scale * config_.z_loss * 2.0 / N);
  Stat* dlogits = moe_fit(a.dlogits, n * E);
  ops_.moe_router_grads(dlogits, moe_array(a.probs), moe_array(a.lse), moe_array(a.choices), gates,
                        dgates, moe_array(a.share), aux_scale, z_scale, N, E, k);
  // dx: the router's part (rank 0) and each token's experts' input gradients, in choice order.
  ops_.moe_input_grads(dx, dlogits, bias_rank() ? weights + at_.router() : nullptr, dinput,
                       moe_array(a.row), N, k, E, C);
}

template <class Ops>
void MoeMlp<Ops>::backward_weight(Activations& a, Grad* dweights, int own_begin,
                                  int own_count) const {
  const int E = config_.experts, C = C_, H = H_, Fc = Fc_;
  STRATA_CHECK(own_begin >= 0 && own_count >= 0 && own_begin + own_count <= a.tokens,
               "MoE layer: own tokens [", own_begin, ", ", own_begin + own_count, ") of ",
               a.tokens);
  const Value* dout = moe_array(a.dout);
  const Value* act = moe_array(a.act);
  const Value* dpre = moe_array(a.dpre);
  const Value* xe = moe_array(a.xe);
  // The replicated proj biases count each expert row once over the tensor-parallel group (see
  // the header for which rank counts them).
  const bool bias_rows = own_begin == 0;
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    ops_.matmul_backward_weight(dweights + at_.proj_weight(j),
                                bias_rows ? bias_at(dweights, at_.proj_bias(j)) : nullptr,
                                dout + first * C, act + first * H, rows, H, C, Fp8Gemm{});
    ops_.matmul_backward_weight(dweights + at_.fc_weight(j), bias_at(dweights, at_.fc_bias(j)),
                                dpre + first * Fc, xe + first * C, rows, C, Fc, Fp8Gemm{});
  }
  // The router over this rank's tokens: dWr (E, C) += dlogitsᵀ · x.
  const std::size_t own = static_cast<std::size_t>(own_begin);
  ops_.moe_router_weight_grad(dweights + at_.router(), moe_array(a.dlogits) + own * E,
                              moe_array(a.x) + own * C, own_count, C, E);
}

}  // namespace strata
