// Merging two partial attentions of one query row, written once for the CPU (model/kernels/cpu/
// attention.h's attention_merge) and the GPU: context parallelism attends a query chunk to each
// key chunk of its sequence apart, and each pair gives an output normalised over its own keys and
// their log-sum-exp (lse). Over the union of two disjoint key sets,
//   lse  = log(e^lse_a + e^lse_b)
//   out  = (e^lse_a · out_a + e^lse_b · out_b) / e^lse
// so the merged row is out_a·w_a + out_b·w_b with w = e^(lse_side − lse), computed from the larger
// lse so that nothing overflows (one of the two exponentials is 1). A side that saw no key has
// lse −∞ and weight 0; when neither saw one, the row stays 0 with lse −∞.
//
// The merge is exact up to rounding: merging in any order gives the whole row's attention to a
// few ulps, which is why a context-parallel run matches one process to the fp32 bound and not
// bitwise (the attention over one key chunk is also summed in another order than over all keys).
#pragma once

#include <cmath>

#include "model/core/host_device.h"

namespace strata {

template <class F>
struct AttentionMergeWeights {
  F own = 0;          // the weight of the row's current output
  F part = 0;         // the weight of the merged-in part
  F lse = -INFINITY;  // the log-sum-exp over both key sets
};

template <class F>
STRATA_HOST_DEVICE inline AttentionMergeWeights<F> attention_merge_weights(F lse, F part_lse) {
  using std::exp, std::log;
  const F high = lse > part_lse ? lse : part_lse;
  if (high == -F(INFINITY)) return {F(0), F(0), -F(INFINITY)};
  const F own = exp(lse - high), part = exp(part_lse - high);
  const F sum = own + part;  // in [1, 2]
  return {own / sum, part / sum, high + log(sum)};
}

}  // namespace strata
