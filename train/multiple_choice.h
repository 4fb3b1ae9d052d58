// Multiple-choice accuracy (HellaSwag's acc and acc_norm, as llm.c measures them during training)
// over the examples of data/multiple_choice.h, shared by `eval --multiple-choice` and in-training
// evaluation (train.eval_multiple_choice), docs/ARCHITECTURE.md §5 "Multiple choice".
//
// Each ending is one window of the evaluation forward (train/evaluate.h): the context's ids then
// the ending's, the last seq_len + 1 of them when they are more (the context loses its start;
// an ending is never cut, data/multiple_choice.h bounds it). Its score is the sum over its ids
// of log p(id | the ids before it), in natural log, summed in double. The chosen ending is the
// argmax of the score (mc_acc) or of the score divided by the ending's token count (mc_acc_norm);
// among equal scores the first ending is chosen. Accuracy is the fraction of examples whose
// chosen ending is the label, over every example of the file.
#pragma once

#include <cstdint>
#include <vector>

#include "data/multiple_choice.h"
#include "model/gpt.h"
#include "parallel/pipeline/pipeline_executor.h"

namespace strata {

struct MultipleChoiceTally {
  std::int64_t examples = 0, correct = 0, correct_norm = 0;
  double accuracy() const { return examples ? static_cast<double>(correct) / examples : 0.0; }
  double accuracy_norm() const {
    return examples ? static_cast<double>(correct_norm) / examples : 0.0;
  }
};

// The index of the chosen ending from the endings' scores and token counts: by score, or with
// `normalised` by score per token; the first of equals.
int chosen_ending(const std::vector<double>& scores, const MultipleChoiceExample& example,
                  bool normalised);

// Every example's ending scores, in one process (`eval`), micro_batch windows per forward.
std::vector<std::vector<double>> score_endings(Gpt<float>& model, const float* params,
                                               const std::vector<MultipleChoiceExample>& examples,
                                               int micro_batch);

// Through a pipeline (every stage of a replica calls it, with the weights bound to its stage):
// the examples i with i % shard_count == shard_rank; the tally arrives on the last stage, other
// stages return zeros. Summing the shards' tallies gives the file's.
MultipleChoiceTally evaluate_multiple_choice(PipelineExecutor& executor,
                                             const std::vector<MultipleChoiceExample>& examples,
                                             int seq_len, int micro_batch, int shard_rank,
                                             int shard_count);

// The tally of examples[i] for every i with scores (scores[i] empty: not this shard's).
MultipleChoiceTally tally_multiple_choice(const std::vector<MultipleChoiceExample>& examples,
                                          const std::vector<std::vector<double>>& scores);

}  // namespace strata
