// CpuOps<T>'s mixture-of-experts ops (model/ops/cpu_ops.h), defined beside the MoE layer whose host
// routing and exchange they read (so model/ops uses nothing of model/moe): the loops MoeLayer<T>
// ran inline before the ops existed, each moved unchanged (same arithmetic, same order) into the op
// for its step, followed by the rounding the layer did after it, so the CPU model stays bitwise
// what it was. model/moe/moe_mlp_impl.h calls them; the CUDA counterparts are cuda_moe_ops.cu.
#include <algorithm>
#include <vector>

#include "model/kernels/cpu/matmul.h"
#include "model/kernels/moe_routing.h"
#include "model/moe/moe_exchange.h"
#include "model/moe/moe_routing.h"
#include "model/ops/cpu_ops.h"

namespace strata {

template <class T>
void CpuOps<T>::moe_router_forward(Stat* probs, Stat* lse, int* choices, Stat* gates,
                                   const Value* x, const Value* router, int N, int C, int E,
                                   int k) {
  const std::size_t n = static_cast<std::size_t>(N);
  std::vector<T> logits(n * E);
  cpu::matmul_forward(logits.data(), x, router, static_cast<const T*>(nullptr), N, C, E);
  for (std::size_t t = 0; t < n; ++t) {
    lse[t] = moe_softmax(logits.data() + t * E, E, probs + t * E);
    moe_top_k(probs + t * E, E, k, choices + t * k);
    moe_gates(probs + t * E, choices + t * k, k, gates + t * k);
  }
}

template <class T>
MoeRouterHost CpuOps<T>::moe_router_to_host(const int* choices, const Stat* probs, const Stat* lse,
                                            int N, int E, int /*k*/) {
  const std::size_t n = static_cast<std::size_t>(N);
  MoeRouterHost host;
  host.choices = choices;
  host.prob_sums.assign(static_cast<std::size_t>(E), 0.0);
  for (int e = 0; e < E; ++e) {
    double mean = 0;
    for (std::size_t t = 0; t < n; ++t) mean += probs[t * E + static_cast<std::size_t>(e)];
    host.prob_sums[static_cast<std::size_t>(e)] = mean;
  }
  // The z-loss term by term (CUDA sums the lse² first and divides once).
  for (std::size_t t = 0; t < n; ++t) host.z += double(lse[t]) * lse[t] / N;
  return host;
}

template <class T>
void CpuOps<T>::moe_routing_to_device(int* assignments, Stat* share, const MoeRouting& routing,
                                      const std::vector<double>& chosen_share) {
  if (assignments != routing.assignments.data())
    std::copy(routing.assignments.begin(), routing.assignments.end(), assignments);
  for (std::size_t e = 0; e < chosen_share.size(); ++e) share[e] = static_cast<T>(chosen_share[e]);
}

template <class T>
void CpuOps<T>::moe_gather_rows(Value* xe, int* row, const Value* x, const int* assignments, int A,
                                int N, int k, int C) {
  std::fill_n(row, static_cast<std::size_t>(N) * k, -1);
  for (std::size_t r = 0; r < static_cast<std::size_t>(A); ++r) {
    const int assignment = assignments[r];
    row[static_cast<std::size_t>(assignment)] = static_cast<int>(r);
    std::copy_n(x + static_cast<std::size_t>(assignment / k) * C, C, xe + r * C);
  }
}

template <class T>
void CpuOps<T>::moe_exchange_rows(RowExchange direction, const MoeExchange& plan, Collectives& ep,
                                  const Value* from, Value* to, int C) {
  if (direction == RowExchange::dispatch)
    moe_dispatch(plan, ep, from, C, to);
  else
    moe_combine(plan, ep, from, C, to);
}

template <class T>
void CpuOps<T>::moe_combine_rows(Value* y, const Value* out, const Stat* gates, const int* row,
                                 int N, int k, int C) {
  const std::size_t n = static_cast<std::size_t>(N);
  // Each token's experts added in choice order (the same order on any layout).
  std::fill_n(y, n * C, T(0));
  for (std::size_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = row[t * k + static_cast<std::size_t>(j)];
      if (r < 0) continue;
      const T g = gates[t * k + static_cast<std::size_t>(j)];
      const T* o = out + static_cast<std::size_t>(r) * C;
      for (int c = 0; c < C; ++c) y[t * C + c] += g * o[c];
    }
  round_to_compute(y, static_cast<long>(n * C));
}

template <class T>
void CpuOps<T>::moe_gate_grads(Stat* dgates, Value* dout, const Value* dy, const Value* out,
                               const Stat* gates, const int* assignments, int A, int N, int k,
                               int C) {
  for (std::size_t r = 0; r < static_cast<std::size_t>(A); ++r) {
    const std::size_t assignment = static_cast<std::size_t>(assignments[r]);
    const T* dyt = dy + (assignment / k) * C;
    const T* o = out + r * C;
    T dot = 0;
    for (int c = 0; c < C; ++c) {
      dot += dyt[c] * o[c];
      dout[r * C + c] = gates[assignment] * dyt[c];
    }
    dgates[assignment] = dot;
  }
  round_to_compute(dout, static_cast<long>(A) * C);
  // Each rank's dot covers its part of the output (rank 0's with the proj bias): the sum is the
  // whole output's.
  if (tp_->size() > 1) tp_->all_reduce_sum(dgates, static_cast<std::size_t>(N) * k);
}

template <class T>
void CpuOps<T>::moe_router_grads(Stat* dlogits, const Stat* probs, const Stat* lse,
                                 const int* choices, const Stat* gates, const Stat* dgates,
                                 const Stat* share, Stat aux_scale, Stat z_scale, int N, int E,
                                 int k) {
  std::vector<T> dp(static_cast<std::size_t>(E));
  for (std::size_t t = 0; t < static_cast<std::size_t>(N); ++t)
    moe_router_backward(probs + t * E, lse[t], choices + t * k, gates + t * k, dgates + t * k, k, E,
                        share, aux_scale, z_scale, dp.data(), dlogits + t * E);
}

template <class T>
void CpuOps<T>::moe_input_grads(Value* dx, const Stat* dlogits, const Value* router,
                                const Value* dxe, const int* row, int N, int k, int E, int C) {
  const std::size_t n = static_cast<std::size_t>(N);
  if (router != nullptr)
    cpu::matmul_backward_input(dx, dlogits, router, N, C, E);
  else
    std::fill_n(dx, n * C, T(0));
  // Each token's experts' input gradients, in choice order.
  for (std::size_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = row[t * k + static_cast<std::size_t>(j)];
      if (r < 0) continue;
      const T* g = dxe + static_cast<std::size_t>(r) * C;
      for (int c = 0; c < C; ++c) dx[t * C + c] += g[c];
    }
  round_to_compute(dx, static_cast<long>(n * C));
}

template <class T>
void CpuOps<T>::moe_router_weight_grad(Grad* drouter, const Stat* dlogits, const Value* x, int N,
                                       int C, int E) {
  cpu::matmul_backward_weight(drouter, static_cast<T*>(nullptr), dlogits, x, N, C, E);
}

// These members only (the class itself is instantiated in cpu_ops.cpp); Value = Grad = Stat = T.
#define STRATA_CPU_MOE_OPS(T)                                                                      \
  template void CpuOps<T>::moe_router_forward(T*, T*, int*, T*, const T*, const T*, int, int, int, \
                                              int);                                                \
  template MoeRouterHost CpuOps<T>::moe_router_to_host(const int*, const T*, const T*, int, int,   \
                                                       int);                                       \
  template void CpuOps<T>::moe_routing_to_device(int*, T*, const MoeRouting&,                      \
                                                 const std::vector<double>&);                      \
  template void CpuOps<T>::moe_gather_rows(T*, int*, const T*, const int*, int, int, int, int);    \
  template void CpuOps<T>::moe_exchange_rows(RowExchange, const MoeExchange&, Collectives&,        \
                                             const T*, T*, int);                                   \
  template void CpuOps<T>::moe_combine_rows(T*, const T*, const T*, const int*, int, int, int);    \
  template void CpuOps<T>::moe_gate_grads(T*, T*, const T*, const T*, const T*, const int*, int,   \
                                          int, int, int);                                          \
  template void CpuOps<T>::moe_router_grads(T*, const T*, const T*, const int*, const T*,          \
                                            const T*, const T*, T, T, int, int, int);              \
  template void CpuOps<T>::moe_input_grads(T*, const T*, const T*, const T*, const int*, int, int, \
                                           int, int);                                              \
  template void CpuOps<T>::moe_router_weight_grad(T*, const T*, const T*, int, int, int);
STRATA_CPU_MOE_OPS(float)
STRATA_CPU_MOE_OPS(double)
#undef STRATA_CPU_MOE_OPS

}  // namespace strata
