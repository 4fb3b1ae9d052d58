// Validation loss with the one definition of docs/ARCHITECTURE.md §5 shared by `eval` and
// in-training evaluation: windows i = 0 … ⌊(N−1)/T⌋−1 of the first N tokens of the split, window i
// holds tokens [i·T, i·T+T]; the loss is the mean natural-log cross-entropy over all targets.
#pragma once

#include <cstdint>
#include <vector>

#include "data/token_shards.h"
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
// stage): the sums arrive on the last stage; other stages return zeros.
LossSum evaluate_loss(PipelineExecutor& executor, const TokenSource& split, std::int64_t n_tokens,
                      int seq_len, int micro_batch, int shard_rank, int shard_count);

// The windows shard `shard_rank` evaluates, grouped into forward passes of at most micro_batch.
std::vector<std::vector<std::uint64_t>> eval_batches(const TokenSource& split,
                                                     std::int64_t n_tokens, int seq_len,
                                                     int micro_batch, int shard_rank,
                                                     int shard_count);

}  // namespace strata
