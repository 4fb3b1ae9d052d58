// Validation loss with the one definition of docs/ARCHITECTURE.md §5 shared by `eval` and
// in-training evaluation: windows i = 0 … ⌊(N−1)/T⌋−1 of the first N tokens of the split, window i
// holds tokens [i·T, i·T+T]; the loss is the mean natural-log cross-entropy over all targets.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/token_shards.h"
#include "model/core/context_chunks.h"
#include "model/gpt.h"
#include "parallel/pipeline/pipeline_executor.h"

namespace strata {

struct LossSum {
  double sum = 0;          // Σ cross-entropy over the targets evaluated here
  std::int64_t count = 0;  // number of targets
};

// Evaluates the windows i with i % shard_count == shard_rank, micro_batch windows per forward.
// Summing the results of all shards (e.g. an all-reduce over data-parallel ranks) gives the total.
LossSum evaluate_loss(Gpt<float>& model, const float* params, const TokenSource& split,
                      std::int64_t n_tokens, int micro_batch, int shard_rank, int shard_count);

// The same through a pipeline (every stage of a replica calls it, with the weights bound to its
// stage): the sums arrive on the last stage; other stages return zeros. Under context parallelism
// (`context`: this rank's chunks of every window) the sums are of this rank's rows: the cp group's
// sum is the replica's.
LossSum evaluate_loss(PipelineExecutor& executor, const TokenSource& split, std::int64_t n_tokens,
                      int seq_len, int micro_batch, int shard_rank, int shard_count,
                      const ContextChunks& context = {});

// Fills the inputs and targets (T each) of window `w`.
using FillWindow =
    std::function<void(std::uint64_t w, std::int32_t* inputs, std::int32_t* targets)>;
// Takes the T per-position losses (−log p(target)) of window `w`.
using TakeWindowLosses = std::function<void(std::uint64_t w, const float* losses)>;

// Called after a forward's losses are taken, with its windows, before the next forward (`eval
// --gradients` runs the backward of the pass there).
using AfterForward = std::function<void(const std::vector<std::uint64_t>& windows)>;

// The forward passes of evaluation, shared by val_loss, its gradient and multiple-choice scoring:
// each batch of `batches` (window ids, at most micro_batch each) is one forward.
void forward_windows(Gpt<float>& model, const float* params,
                     const std::vector<std::vector<std::uint64_t>>& batches, const FillWindow& fill,
                     const TakeWindowLosses& take, const AfterForward& after = nullptr);
// The same through a pipeline, on the rank of the last stage (`take` is not called elsewhere).
// Under ZeRO stage 3 each pass gathers weights over the data-parallel shards, so all of them must
// run the same number of passes: a shard with fewer than `passes` batches runs the rest on one
// window of zeros, whose losses are not taken. Under context parallelism the executor runs this
// rank's chunks of each window (context.local_length(seq_len) rows, filled whole and cut), and
// `take` gets the losses of those rows.
void forward_windows(PipelineExecutor& executor, int seq_len,
                     const std::vector<std::vector<std::uint64_t>>& batches, std::size_t passes,
                     const FillWindow& fill, const TakeWindowLosses& take,
                     const ContextChunks& context = {});

// Window ids [0, count) in forward passes of at most micro_batch.
std::vector<std::vector<std::uint64_t>> window_batches(std::uint64_t count, int micro_batch);

// The windows shard `shard_rank` evaluates, grouped into forward passes of at most micro_batch.
std::vector<std::vector<std::uint64_t>> eval_batches(const TokenSource& split,
                                                     std::int64_t n_tokens, int seq_len,
                                                     int micro_batch, int shard_rank,
                                                     int shard_count);

}  // namespace strata
