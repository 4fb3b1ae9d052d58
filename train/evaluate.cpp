#include "train/evaluate.h"

#include "data/loader.h"

namespace strata {

std::vector<std::vector<std::uint64_t>> eval_batches(const TokenSource& split,
                                                     std::int64_t n_tokens, int seq_len,
                                                     int micro_batch, int shard_rank,
                                                     int shard_count) {
  const std::uint64_t windows =
      eval_window_count(split, static_cast<std::uint64_t>(n_tokens), seq_len);
  std::vector<std::vector<std::uint64_t>> batches;
  for (std::uint64_t w = static_cast<std::uint64_t>(shard_rank); w < windows; w += shard_count) {
    if (batches.empty() || static_cast<int>(batches.back().size()) == micro_batch)
      batches.emplace_back();
    batches.back().push_back(w);
  }
  return batches;
}

namespace {
void fill_windows(const TokenSource& split, const std::vector<std::uint64_t>& windows, int T,
                  std::int32_t* inputs, std::int32_t* targets) {
  for (std::size_t b = 0; b < windows.size(); ++b)
    eval_window(split, windows[b], T, inputs + b * T, targets + b * T);
}
}  // namespace

LossSum evaluate_loss(Gpt<float>& model, const float* params, const TokenSource& split,
                      std::int64_t n_tokens, int micro_batch, int shard_rank, int shard_count) {
  const int T = model.shape().seq_len;
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(micro_batch) * T),
      targets(inputs.size());
  LossSum total;
  for (const auto& windows :
       eval_batches(split, n_tokens, T, micro_batch, shard_rank, shard_count)) {
    const int batch = static_cast<int>(windows.size());
    fill_windows(split, windows, T, inputs.data(), targets.data());
    model.forward(params, inputs.data(), targets.data(), batch, T);
    // Sum in double from the per-position losses so the mean does not depend on batching.
    for (int i = 0; i < batch * T; ++i) total.sum += model.losses()[i];
    total.count += static_cast<std::int64_t>(batch) * T;
  }
  return total;
}

LossSum evaluate_loss(PipelineExecutor& executor, const TokenSource& split, std::int64_t n_tokens,
                      int seq_len, int micro_batch, int shard_rank, int shard_count) {
  auto batches = eval_batches(split, n_tokens, seq_len, micro_batch, shard_rank, shard_count);
  // Every shard runs as many forward passes as shard 0 (which has the most): under ZeRO stage 3
  // each pass gathers weights over the shards, so they must all take part. The extra passes
  // (one window each) are not counted.
  const std::size_t counted = batches.size();
  const std::size_t passes =
      eval_batches(split, n_tokens, seq_len, micro_batch, 0, shard_count).size();
  while (batches.size() < passes) batches.push_back({0});
  std::vector<int> sizes;
  for (const auto& windows : batches) sizes.push_back(static_cast<int>(windows.size()));
  LossSum total;
  executor.forward_only(
      sizes,
      [&](int mb, std::int32_t* inputs, std::int32_t* targets) {
        fill_windows(split, batches[mb], seq_len, inputs, targets);
      },
      [&](int mb, const float* losses, int count) {
        if (static_cast<std::size_t>(mb) >= counted) return;
        for (int i = 0; i < count; ++i) total.sum += losses[i];
        total.count += count;
      });
  return total;
}

}  // namespace strata
