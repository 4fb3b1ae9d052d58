#include "model/moe/moe_layer.h"

#include <algorithm>

#include "model/core/error.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/moe_routing.h"

namespace strata {

template <class T>
std::size_t MoeActivations<T>::elements() const {
  std::size_t n = 0;
  for (const std::vector<T>* v :
       {&x, &probs, &lse, &gates, &out, &xe, &pre, &act, &dout, &dpre, &dlogits})
    n += v->size();
  return n;
}

void MoeTotals::add(double* totals, int layer, int experts, const MoeStats& stats) {
  double* t = totals + static_cast<std::size_t>(layer) * stride(experts);
  t[micro_batches] += 1;
  t[aux] += stats.aux;
  t[z] += stats.z;
  t[choices] += static_cast<double>(stats.choices);
  t[dropped] += static_cast<double>(stats.dropped);
  for (int e = 0; e < experts; ++e)
    t[kFields + e] += stats.tokens_per_expert[static_cast<std::size_t>(e)];
}

namespace {
// Grows (never shrinks) a buffer to at least n elements: a slot keeps its largest micro-batch's.
template <class V>
void fit(V& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}
}  // namespace

template <class T>
MoeLayer<T>::MoeLayer(int d_model, const MoeConfig& config, Collectives* tp,
                      cpu::ComputeDtype compute, Collectives* ep)
    : C_(d_model),
      H_(4 * d_model / (tp != nullptr ? tp->size() : 1)),
      config_(config),
      tp_(tp),
      compute_(compute),
      ep_(ep != nullptr ? ep : &alone_),
      at_(static_cast<std::size_t>(d_model), static_cast<std::size_t>(config.experts),
          static_cast<std::size_t>(H_), static_cast<std::size_t>(config.experts / ep_->size())) {
  STRATA_CHECK(config.experts >= 1 && config.top_k >= 1 && config.top_k <= config.experts,
               "MoE layer: top_k ", config.top_k, " of ", config.experts, " experts");
  STRATA_CHECK(config.experts % ep_->size() == 0, "expert parallelism of ", ep_->size(),
               " does not divide ", config.experts, " experts");
}

template <class T>
void MoeLayer<T>::round(T* data, std::size_t n) const {
  if (compute_ != cpu::ComputeDtype::fp32)
    cpu::round_to_dtype(data, static_cast<long>(n), compute_);
}

template <class T>
const MoeStats& MoeLayer<T>::forward(MoeActivations<T>& a, const T* x, int N, int seq_len,
                                     const T* weights, T* y) const {
  const int E = config_.experts, k = config_.top_k, C = C_, H = H_;
  const std::size_t n = static_cast<std::size_t>(N);
  const bool bias_rank = tp_ == nullptr || tp_->rank() == 0;
  a.tokens = N;
  a.x.assign(x, x + n * C);
  std::vector<T> logits(n * E);
  fit(a.probs, n * E);
  fit(a.lse, n);
  a.choices.resize(n * k);
  fit(a.gates, n * k);
  // Router: logits, probabilities, choices and gates per token.
  cpu::matmul_forward(logits.data(), x, weights + at_.router(), static_cast<const T*>(nullptr), N,
                      C, E);
  for (std::size_t t = 0; t < n; ++t) {
    a.lse[t] = moe_softmax(logits.data() + t * E, E, a.probs.data() + t * E);
    moe_top_k(a.probs.data() + t * E, E, k, a.choices.data() + t * k);
    moe_gates(a.probs.data() + t * E, a.choices.data() + t * k, k, a.gates.data() + t * k);
  }
  // Groups of group_sequences sequences; a micro-batch they do not divide (an evaluation's last)
  // is one group.
  const int group = capacity_group_tokens(N, seq_len, config_.group_sequences);
  a.routing = route_tokens(a.choices.data(), N, k, E, group, config_.capacity(group));
  // The losses: f_e from the choices before capacity, P_e the mean probability.
  a.chosen_share = chosen_shares(a.choices.data(), N, k, E);
  MoeStats& stats = a.stats;
  stats = MoeStats{};
  for (int e = 0; e < E; ++e) {
    double mean = 0;
    for (std::size_t t = 0; t < n; ++t) mean += a.probs[t * E + static_cast<std::size_t>(e)];
    stats.aux += E * a.chosen_share[static_cast<std::size_t>(e)] * mean / N;
  }
  for (std::size_t t = 0; t < n; ++t) stats.z += double(a.lse[t]) * a.lse[t] / N;
  stats.choices = static_cast<std::int64_t>(N) * k;
  stats.dropped = a.routing.dropped();
  for (int e = 0; e < E; ++e) stats.tokens_per_expert.push_back(a.routing.assigned(e));
  // The assignments' rows (grouped by expert, in token order) go to their experts' ranks.
  const std::size_t A = a.routing.assignments.size();
  a.row.assign(n * k, -1);
  std::vector<T> rows(A * C);
  for (std::size_t r = 0; r < A; ++r) {
    const int assignment = a.routing.assignments[r];
    a.row[static_cast<std::size_t>(assignment)] = static_cast<int>(r);
    std::copy_n(x + static_cast<std::size_t>(assignment / k) * C, C, rows.data() + r * C);
  }
  a.exchange = plan_moe_exchange(a.routing, *ep_);
  moe_dispatch(a.exchange, *ep_, rows.data(), C, a.xe);
  // This rank's experts, each on its rows.
  const std::size_t R = static_cast<std::size_t>(a.exchange.received());
  fit(a.pre, R * H);
  fit(a.act, R * H);
  std::vector<T> out(R * C);
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int count = a.exchange.expert_rows(j);
    if (count == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    T* pre = a.pre.data() + first * H;
    T* act = a.act.data() + first * H;
    const std::size_t hidden = static_cast<std::size_t>(count) * H;
    cpu::matmul_forward(pre, a.xe.data() + first * C, weights + at_.fc_weight(j),
                        weights + at_.fc_bias(j), count, C, H);
    round(pre, hidden);
    cpu::gelu_forward(act, pre, static_cast<long>(hidden));
    round(act, hidden);
    cpu::matmul_forward(out.data() + first * C, act, weights + at_.proj_weight(j),
                        bias_rank ? weights + at_.proj_bias(j) : nullptr, count, H, C);
    round(out.data() + first * C, static_cast<std::size_t>(count) * C);
  }
  // The outputs come home, in the order their rows left.
  moe_combine(a.exchange, *ep_, out.data(), C, a.out);
  stats.exchanged_rows = static_cast<std::int64_t>(a.exchange.rows_to_others(ep_->rank()) +
                                                   a.exchange.rows_from_others(ep_->rank()));
  // Each token's experts added in choice order (the same order on any layout).
  std::fill_n(y, n * C, T(0));
  for (std::size_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = a.row[t * k + static_cast<std::size_t>(j)];
      if (r < 0) continue;
      const T g = a.gates[t * k + static_cast<std::size_t>(j)];
      const T* out = a.out.data() + static_cast<std::size_t>(r) * C;
      for (int c = 0; c < C; ++c) y[t * C + c] += g * out[c];
    }
  round(y, n * C);
  return stats;
}

template <class T>
T MoeLayer<T>::loss(const MoeActivations<T>& a) const {
  return static_cast<T>(config_.aux_loss * a.stats.aux + config_.z_loss * a.stats.z);
}

template <class T>
void MoeLayer<T>::backward_input(MoeActivations<T>& a, const T* dy, T loss_scale, const T* weights,
                                 T* dx) const {
  const int E = config_.experts, k = config_.top_k, C = C_, H = H_, N = a.tokens;
  const std::size_t n = static_cast<std::size_t>(N), A = a.routing.assignments.size();
  const bool bias_rank = tp_ == nullptr || tp_->rank() == 0;
  // Gates and expert outputs: dgate = dy_t · (the whole expert output), dout = gate · dy_t.
  std::vector<T> dgates(n * k, T(0)), dout(A * C);
  for (std::size_t r = 0; r < A; ++r) {
    const std::size_t assignment = static_cast<std::size_t>(a.routing.assignments[r]);
    const T* dyt = dy + (assignment / k) * C;
    const T* out = a.out.data() + r * C;
    T dot = 0;
    for (int c = 0; c < C; ++c) {
      dot += dyt[c] * out[c];
      dout[r * C + c] = a.gates[assignment] * dyt[c];
    }
    dgates[assignment] = dot;
  }
  round(dout.data(), A * C);
  // Each rank's dot covers its part of the output (rank 0's with the proj bias): the sum is the
  // whole output's.
  if (tp_ != nullptr && tp_->size() > 1) tp_->all_reduce_sum(dgates.data(), dgates.size());
  // The output gradients go to the experts' ranks as the rows did; the input gradients return.
  moe_dispatch(a.exchange, *ep_, dout.data(), C, a.dout);
  const std::size_t R = static_cast<std::size_t>(a.exchange.received());
  fit(a.dpre, R * H);
  std::vector<T> dact(R * H), dxe(R * C);
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    const std::size_t hidden = static_cast<std::size_t>(rows) * H;
    cpu::matmul_backward_input(dact.data() + first * H, a.dout.data() + first * C,
                               weights + at_.proj_weight(j), rows, H, C);
    round(dact.data() + first * H, hidden);
    cpu::gelu_backward(a.dpre.data() + first * H, a.pre.data() + first * H, dact.data() + first * H,
                       static_cast<long>(hidden));
    round(a.dpre.data() + first * H, hidden);
    cpu::matmul_backward_input(dxe.data() + first * C, a.dpre.data() + first * H,
                               weights + at_.fc_weight(j), rows, C, H);
    round(dxe.data() + first * C, static_cast<std::size_t>(rows) * C);
  }
  std::vector<T> dinput;  // (A, C) this rank's assignments' input gradients
  moe_combine(a.exchange, *ep_, dxe.data(), C, dinput);
  // The router: the gates' gradient, the aux loss's (through P_e) and the z-loss's.
  const T aux_scale = static_cast<T>(loss_scale * config_.aux_loss * E / N);
  const T z_scale = static_cast<T>(loss_scale * config_.z_loss * 2.0 / N);
  std::vector<T> dp(static_cast<std::size_t>(E)), share(static_cast<std::size_t>(E));
  for (int e = 0; e < E; ++e)
    share[static_cast<std::size_t>(e)] =
        static_cast<T>(a.chosen_share[static_cast<std::size_t>(e)]);
  fit(a.dlogits, n * E);
  for (std::size_t t = 0; t < n; ++t)
    moe_router_backward(a.probs.data() + t * E, a.lse[t], a.choices.data() + t * k,
                        a.gates.data() + t * k, dgates.data() + t * k, k, E, share.data(),
                        aux_scale, z_scale, dp.data(), a.dlogits.data() + t * E);
  if (bias_rank)
    cpu::matmul_backward_input(dx, a.dlogits.data(), weights + at_.router(), N, C, E);
  else
    std::fill_n(dx, n * C, T(0));
  // Each token's experts' input gradients, in choice order.
  for (std::size_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = a.row[t * k + static_cast<std::size_t>(j)];
      if (r < 0) continue;
      const T* g = dinput.data() + static_cast<std::size_t>(r) * C;
      for (int c = 0; c < C; ++c) dx[t * C + c] += g[c];
    }
  round(dx, n * C);
}

template <class T>
void MoeLayer<T>::backward_weight(MoeActivations<T>& a, T* dweights, int own_begin,
                                  int own_count) const {
  const int E = config_.experts, C = C_, H = H_;
  const std::size_t own_first = static_cast<std::size_t>(own_begin);
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    const T* dout = a.dout.data() + first * C;
    // The replicated bias (see the header for which rank counts the rows).
    cpu::matmul_backward_weight(dweights + at_.proj_weight(j),
                                own_begin == 0 ? dweights + at_.proj_bias(j) : nullptr, dout,
                                a.act.data() + first * H, rows, H, C);
    cpu::matmul_backward_weight(dweights + at_.fc_weight(j), dweights + at_.fc_bias(j),
                                a.dpre.data() + first * H, a.xe.data() + first * C, rows, C, H);
  }
  cpu::matmul_backward_weight(dweights + at_.router(), static_cast<T*>(nullptr),
                              a.dlogits.data() + own_first * E, a.x.data() + own_first * C,
                              own_count, C, E);
}

template class MoeLayer<float>;
template class MoeLayer<double>;
template struct MoeActivations<float>;
template struct MoeActivations<double>;

}  // namespace strata
