#include "model/moe/moe_layer.h"

#include <algorithm>

#include "model/core/error.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/moe_routing.h"

namespace strata {

template <class T>
MoeLayer<T>::MoeLayer(int d_model, const MoeConfig& config)
    : C_(d_model),
      config_(config),
      at_{static_cast<std::size_t>(d_model), static_cast<std::size_t>(config.experts)} {
  STRATA_CHECK(config.experts >= 1 && config.top_k >= 1 && config.top_k <= config.experts,
               "MoE layer: top_k ", config.top_k, " of ", config.experts, " experts");
}

template <class T>
const MoeStats& MoeLayer<T>::forward(const T* x, int N, int seq_len, const T* weights, T* y) {
  const int E = config_.experts, k = config_.top_k, C = C_, H = 4 * C_;
  const std::size_t n = static_cast<std::size_t>(N);
  N_ = N;
  x_.assign(x, x + n * C);
  logits_.resize(n * E);
  probs_.resize(n * E);
  lse_.resize(n);
  choices_.resize(n * k);
  gates_.resize(n * k);
  // Router: logits, probabilities, choices and gates per token.
  cpu::matmul_forward(logits_.data(), x, weights + at_.router(), static_cast<const T*>(nullptr), N,
                      C, E);
  for (std::size_t t = 0; t < n; ++t) {
    lse_[t] = moe_softmax(logits_.data() + t * E, E, probs_.data() + t * E);
    moe_top_k(probs_.data() + t * E, E, k, choices_.data() + t * k);
    moe_gates(probs_.data() + t * E, choices_.data() + t * k, k, gates_.data() + t * k);
  }
  const int group = config_.group_sequences * seq_len;
  routing_ = route_tokens(choices_.data(), N, k, E, group, config_.capacity(group));
  // The losses: f_e from the choices before capacity, P_e the mean probability.
  chosen_share_.assign(static_cast<std::size_t>(E), 0.0);
  for (int e : choices_) chosen_share_[static_cast<std::size_t>(e)] += 1.0 / (double(N) * k);
  stats_ = MoeStats{};
  for (int e = 0; e < E; ++e) {
    double mean = 0;
    for (std::size_t t = 0; t < n; ++t) mean += probs_[t * E + static_cast<std::size_t>(e)];
    stats_.aux += E * chosen_share_[static_cast<std::size_t>(e)] * mean / N;
  }
  for (std::size_t t = 0; t < n; ++t) stats_.z += double(lse_[t]) * lse_[t] / N;
  stats_.choices = static_cast<std::int64_t>(N) * k;
  stats_.dropped = routing_.dropped();
  for (int e = 0; e < E; ++e) stats_.tokens_per_expert.push_back(routing_.assigned(e));
  // The experts, each on its assignments' rows (gathered in token order).
  const std::size_t A = routing_.assignments.size();
  row_.assign(n * k, -1);
  xe_.resize(A * C);
  pre_.resize(A * H);
  act_.resize(A * H);
  out_.resize(A * C);
  for (std::size_t r = 0; r < A; ++r) {
    const int a = routing_.assignments[r];
    row_[static_cast<std::size_t>(a)] = static_cast<int>(r);
    std::copy_n(x + static_cast<std::size_t>(a / k) * C, C, xe_.data() + r * C);
  }
  for (int e = 0; e < E; ++e) {
    const int rows = routing_.assigned(e);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(routing_.offsets[static_cast<std::size_t>(e)]);
    cpu::matmul_forward(pre_.data() + first * H, xe_.data() + first * C, weights + at_.fc_weight(e),
                        weights + at_.fc_bias(e), rows, C, H);
    cpu::gelu_forward(act_.data() + first * H, pre_.data() + first * H,
                      static_cast<long>(rows) * H);
    cpu::matmul_forward(out_.data() + first * C, act_.data() + first * H,
                        weights + at_.proj_weight(e), weights + at_.proj_bias(e), rows, H, C);
  }
  // Each token's experts added in choice order (the same order on any layout).
  std::fill_n(y, n * C, T(0));
  for (std::size_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = row_[t * k + static_cast<std::size_t>(j)];
      if (r < 0) continue;
      const T g = gates_[t * k + static_cast<std::size_t>(j)];
      const T* out = out_.data() + static_cast<std::size_t>(r) * C;
      for (int c = 0; c < C; ++c) y[t * C + c] += g * out[c];
    }
  return stats_;
}

template <class T>
T MoeLayer<T>::loss() const {
  return static_cast<T>(config_.aux_loss * stats_.aux + config_.z_loss * stats_.z);
}

template <class T>
void MoeLayer<T>::backward(const T* dy, T loss_scale, const T* weights, T* dx, T* dweights) {
  const int E = config_.experts, k = config_.top_k, C = C_, H = 4 * C_, N = N_;
  const std::size_t n = static_cast<std::size_t>(N), A = routing_.assignments.size();
  // Gates and expert outputs: dgate = dy_t · out, dout = gate · dy_t.
  std::vector<T> dgates(n * k, T(0)), dout(A * C), dact(A * H), dxe(A * C);
  for (std::size_t r = 0; r < A; ++r) {
    const std::size_t a = static_cast<std::size_t>(routing_.assignments[r]);
    const T* dyt = dy + (a / k) * C;
    const T* out = out_.data() + r * C;
    T dot = 0;
    for (int c = 0; c < C; ++c) {
      dot += dyt[c] * out[c];
      dout[r * C + c] = gates_[a] * dyt[c];
    }
    dgates[a] = dot;
  }
  for (int e = 0; e < E; ++e) {
    const int rows = routing_.assigned(e);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(routing_.offsets[static_cast<std::size_t>(e)]);
    cpu::matmul_backward(dact.data() + first * H, dweights + at_.proj_weight(e),
                         dweights + at_.proj_bias(e), dout.data() + first * C,
                         act_.data() + first * H, weights + at_.proj_weight(e), rows, H, C);
    cpu::gelu_backward(dact.data() + first * H, pre_.data() + first * H, dact.data() + first * H,
                       static_cast<long>(rows) * H);
    cpu::matmul_backward(dxe.data() + first * C, dweights + at_.fc_weight(e),
                         dweights + at_.fc_bias(e), dact.data() + first * H, xe_.data() + first * C,
                         weights + at_.fc_weight(e), rows, C, H);
  }
  // The router: the gates' gradient, the aux loss's (through P_e) and the z-loss's.
  const T aux_scale = static_cast<T>(loss_scale * config_.aux_loss * E / N);
  const T z_scale = static_cast<T>(loss_scale * config_.z_loss * 2.0 / N);
  std::vector<T> dp(static_cast<std::size_t>(E)), dlogits(n * E);
  for (std::size_t t = 0; t < n; ++t) {
    const T* p = probs_.data() + t * E;
    for (int e = 0; e < E; ++e)
      dp[static_cast<std::size_t>(e)] =
          aux_scale * static_cast<T>(chosen_share_[static_cast<std::size_t>(e)]);
    moe_gates_backward(p, choices_.data() + t * k, gates_.data() + t * k, dgates.data() + t * k, k,
                       dp.data());
    T* dl = dlogits.data() + t * E;
    moe_softmax_backward(p, dp.data(), E, dl);
    for (int e = 0; e < E; ++e) dl[e] += z_scale * lse_[t] * p[e];
  }
  cpu::matmul_backward_input(dx, dlogits.data(), weights + at_.router(), N, C, E);
  cpu::matmul_backward_weight(dweights + at_.router(), static_cast<T*>(nullptr), dlogits.data(),
                              x_.data(), N, C, E);
  // Each token's experts' input gradients, in choice order.
  for (std::size_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = row_[t * k + static_cast<std::size_t>(j)];
      if (r < 0) continue;
      const T* g = dxe.data() + static_cast<std::size_t>(r) * C;
      for (int c = 0; c < C; ++c) dx[t * C + c] += g[c];
    }
}

template class MoeLayer<float>;
template class MoeLayer<double>;

}  // namespace strata
