// MoeLayer<T> (moe_layer.h): MoeMlp's passes instantiated for the CPU's ops, the activations'
// element count and the routing totals.
#include "model/moe/moe_layer.h"

#include "model/moe/moe_mlp_impl.h"

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

STRATA_INSTANTIATE_MOE_MLP(CpuOps<float>)
STRATA_INSTANTIATE_MOE_MLP(CpuOps<double>)
template class MoeLayer<float>;
template class MoeLayer<double>;
template struct MoeActivations<float>;
template struct MoeActivations<double>;

}  // namespace strata
