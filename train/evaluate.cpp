#include "train/evaluate.h"

#include <vector>

#include "data/loader.h"

namespace strata {

LossSum evaluate_loss(Gpt<float>& model, const float* params, const TokenSource& split,
                      std::int64_t n_tokens, int micro_batch, int shard_rank, int shard_count) {
  const int T = model.shape().seq_len;
  const std::uint64_t windows = eval_window_count(split, static_cast<std::uint64_t>(n_tokens), T);
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(micro_batch) * T),
      targets(inputs.size());
  LossSum total;
  std::uint64_t next = static_cast<std::uint64_t>(shard_rank);
  while (next < windows) {
    int batch = 0;
    for (; batch < micro_batch && next < windows; ++batch, next += shard_count)
      eval_window(split, next, T, inputs.data() + batch * T, targets.data() + batch * T);
    model.forward(params, inputs.data(), targets.data(), batch, T);
    // Sum in double from the per-position losses so the mean does not depend on batching.
    for (int i = 0; i < batch * T; ++i) total.sum += model.losses()[i];
    total.count += static_cast<std::int64_t>(batch) * T;
  }
  return total;
}

}  // namespace strata
