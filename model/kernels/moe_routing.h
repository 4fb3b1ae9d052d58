// The per-token arithmetic of a mixture-of-experts router (model/moe/moe_layer.h), written once for
// the CPU reference and the CUDA kernels so both pick the same experts with the same gates:
//   probabilities  p = softmax(logits) over the E experts (max subtracted first)
//   top-k          the k largest p, in decreasing order, a tie going to the lower expert index
//   gates          k > 1: p_j / Σ_top p (renormalised over the chosen experts, GShard/Mixtral);
//                  k = 1: p itself (Switch: a renormalised single gate would be the constant 1
//                  and give the router no gradient from the loss)
#pragma once

#include <cmath>

#include "model/core/host_device.h"

namespace strata {

// p[0..E) = softmax(logits[0..E)); returns log Σ exp(logits), the router z-loss's term.
template <class T>
STRATA_HOST_DEVICE T moe_softmax(const T* logits, int E, T* p) {
  using std::exp, std::log;
  T most = logits[0];
  for (int e = 1; e < E; ++e) most = logits[e] > most ? logits[e] : most;
  T sum = 0;
  for (int e = 0; e < E; ++e) {
    p[e] = exp(logits[e] - most);
    sum += p[e];
  }
  for (int e = 0; e < E; ++e) p[e] /= sum;
  return most + log(sum);
}

// The k experts of largest p (k <= E), best first; among equal p the lower index first.
template <class T>
STRATA_HOST_DEVICE void moe_top_k(const T* p, int E, int k, int* experts) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || experts[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;  // strict: ties keep the lower index
    }
    experts[j] = best;
  }
}

// The gates of the chosen experts (see the header).
template <class T>
STRATA_HOST_DEVICE void moe_gates(const T* p, const int* experts, int k, T* gates) {
  T sum = 0;
  for (int j = 0; j < k; ++j) sum += p[experts[j]];
  for (int j = 0; j < k; ++j) gates[j] = k == 1 ? p[experts[j]] : p[experts[j]] / sum;
}

// The gradient of the probabilities from the gates' gradient dgates (added into dp[0..E)).
//   k = 1: dp_e += dg.   k > 1, g_j = p_j / S: dp_{e_i} += (dg_i − Σ_j dg_j g_j) / S.
template <class T>
STRATA_HOST_DEVICE void moe_gates_backward(const T* p, const int* experts, const T* gates,
                                           const T* dgates, int k, T* dp) {
  if (k == 1) {
    dp[experts[0]] += dgates[0];
    return;
  }
  T sum = 0, weighted = 0;
  for (int j = 0; j < k; ++j) {
    sum += p[experts[j]];
    weighted += dgates[j] * gates[j];
  }
  for (int j = 0; j < k; ++j) dp[experts[j]] += (dgates[j] - weighted) / sum;
}

// dlogits[0..E) = p ⊙ (dp − Σ p·dp), the softmax's backward.
template <class T>
STRATA_HOST_DEVICE void moe_softmax_backward(const T* p, const T* dp, int E, T* dlogits) {
  T dot = 0;
  for (int e = 0; e < E; ++e) dot += p[e] * dp[e];
  for (int e = 0; e < E; ++e) dlogits[e] = p[e] * (dp[e] - dot);
}

// One token's router gradient dlogits[0..E), from its probabilities p, its logsumexp lse, its
// chosen experts and gates and the gates' gradient dgates (k each), plus the two router losses:
//   load balancing  aux = E · Σ_e f_e · P_e, P_e = mean_t p_te, f_e held constant: every token's
//                   p_e gets aux_scale · f_e (chosen_share[e] = f_e)
//   z-loss          z = mean_t lse_t²: dlogits_e += z_scale · lse · p_e (d lse / d logits = p)
// aux_scale and z_scale carry the losses' weights, the loss scale and 1/N: aux_scale =
// loss_scale · aux_loss · E / N, z_scale = loss_scale · z_loss · 2 / N. dp[0..E) is scratch.
template <class T>
STRATA_HOST_DEVICE void moe_router_backward(const T* p, T lse, const int* experts, const T* gates,
                                            const T* dgates, int k, int E, const T* chosen_share,
                                            T aux_scale, T z_scale, T* dp, T* dlogits) {
  for (int e = 0; e < E; ++e) dp[e] = aux_scale * chosen_share[e];
  moe_gates_backward(p, experts, gates, dgates, k, dp);
  moe_softmax_backward(p, dp, E, dlogits);
  for (int e = 0; e < E; ++e) dlogits[e] += z_scale * lse * p[e];
}

}  // namespace strata
