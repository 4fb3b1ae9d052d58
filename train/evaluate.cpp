#include "train/evaluate.h"

#include <algorithm>

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

std::vector<std::vector<std::uint64_t>> window_batches(std::uint64_t count, int micro_batch) {
  std::vector<std::vector<std::uint64_t>> batches;
  for (std::uint64_t w = 0; w < count; ++w) {
    if (batches.empty() || static_cast<int>(batches.back().size()) == micro_batch)
      batches.emplace_back();
    batches.back().push_back(w);
  }
  return batches;
}

void forward_windows(Gpt<float>& model, const float* params,
                     const std::vector<std::vector<std::uint64_t>>& batches, const FillWindow& fill,
                     const TakeWindowLosses& take, const AfterForward& after) {
  const int T = model.shape().seq_len;
  std::size_t most = 0;
  for (const auto& windows : batches) most = std::max(most, windows.size());
  std::vector<std::int32_t> inputs(most * T), targets(inputs.size());
  for (const auto& windows : batches) {
    for (std::size_t b = 0; b < windows.size(); ++b)
      fill(windows[b], inputs.data() + b * T, targets.data() + b * T);
    model.forward(params, inputs.data(), targets.data(), static_cast<int>(windows.size()), T);
    for (std::size_t b = 0; b < windows.size(); ++b) take(windows[b], model.losses() + b * T);
    if (after) after(windows);
  }
}

void forward_windows(PipelineExecutor& executor, int seq_len,
                     const std::vector<std::vector<std::uint64_t>>& batches, std::size_t passes,
                     const FillWindow& fill, const TakeWindowLosses& take,
                     const ContextChunks& context) {
  const int T = context.local_length(seq_len);  // rows of each window on this rank
  std::vector<std::int32_t> whole(context.split() ? 2 * static_cast<std::size_t>(seq_len) : 0);
  // Window w into this rank's rows: the whole window, or its chunks cut from it.
  auto fill_rows = [&](std::uint64_t w, std::int32_t* inputs, std::int32_t* targets) {
    if (!context.split()) {
      fill(w, inputs, targets);
      return;
    }
    fill(w, whole.data(), whole.data() + seq_len);
    context.take(whole.data(), inputs, 1, seq_len);
    context.take(whole.data() + seq_len, targets, 1, seq_len);
  };
  const std::size_t counted = batches.size();
  std::vector<int> sizes;
  for (const auto& windows : batches) sizes.push_back(static_cast<int>(windows.size()));
  sizes.resize(std::max(passes, counted), 1);
  executor.forward_only(
      sizes,
      [&](int mb, std::int32_t* inputs, std::int32_t* targets) {
        const auto m = static_cast<std::size_t>(mb);
        if (m >= counted) {
          std::fill(inputs, inputs + T, 0);
          std::fill(targets, targets + T, 0);
          return;
        }
        for (std::size_t b = 0; b < batches[m].size(); ++b)
          fill_rows(batches[m][b], inputs + b * T, targets + b * T);
      },
      [&](int mb, const float* losses, int) {
        const auto m = static_cast<std::size_t>(mb);
        if (m >= counted) return;
        for (std::size_t b = 0; b < batches[m].size(); ++b) take(batches[m][b], losses + b * T);
      });
}

namespace {

// val_loss's windows: the split's, and their losses summed in double so that the mean does not
// depend on batching.
FillWindow split_windows(const TokenSource& split, int T) {
  return [&split, T](std::uint64_t w, std::int32_t* inputs, std::int32_t* targets) {
    eval_window(split, w, T, inputs, targets);
  };
}
TakeWindowLosses add_losses(LossSum& total, int T) {
  return [&total, T](std::uint64_t, const float* losses) {
    for (int i = 0; i < T; ++i) total.sum += losses[i];
    total.count += T;
  };
}

}  // namespace

LossSum evaluate_loss(Gpt<float>& model, const float* params, const TokenSource& split,
                      std::int64_t n_tokens, int micro_batch, int shard_rank, int shard_count) {
  const int T = model.shape().seq_len;
  LossSum total;
  forward_windows(model, params,
                  eval_batches(split, n_tokens, T, micro_batch, shard_rank, shard_count),
                  split_windows(split, T), add_losses(total, T));
  return total;
}

LossSum evaluate_loss(PipelineExecutor& executor, const TokenSource& split, std::int64_t n_tokens,
                      int seq_len, int micro_batch, int shard_rank, int shard_count,
                      const ContextChunks& context) {
  // Shard 0 has the most batches.
  const std::size_t passes =
      eval_batches(split, n_tokens, seq_len, micro_batch, 0, shard_count).size();
  LossSum total;
  forward_windows(executor, seq_len,
                  eval_batches(split, n_tokens, seq_len, micro_batch, shard_rank, shard_count),
                  passes, split_windows(split, seq_len),
                  add_losses(total, context.local_length(seq_len)), context);
  return total;
}

}  // namespace strata
