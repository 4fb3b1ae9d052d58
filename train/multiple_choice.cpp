#include "train/multiple_choice.h"

#include <algorithm>
#include <utility>

#include "train/evaluate.h"

namespace strata {

namespace {

// The windows of one shard's examples: window w is ending `ending` of example `example`.
struct EndingWindows {
  std::vector<std::pair<std::size_t, std::size_t>> at;  // window -> (example, ending)

  EndingWindows(const std::vector<MultipleChoiceExample>& examples, int shard_rank,
                int shard_count) {
    for (std::size_t e = static_cast<std::size_t>(shard_rank); e < examples.size();
         e += static_cast<std::size_t>(shard_count))
      for (std::size_t k = 0; k < examples[e].endings.size(); ++k) at.emplace_back(e, k);
  }
};

// The window of an ending: context then ending, its last T + 1 ids; inputs the first n − 1 of
// them, targets the last n − 1, the rest of the T positions zeros (not scored).
void fill_ending(const MultipleChoiceExample& example, std::size_t ending, int T,
                 std::int32_t* inputs, std::int32_t* targets) {
  std::vector<int> ids = example.context;
  ids.insert(ids.end(), example.endings[ending].begin(), example.endings[ending].end());
  const std::size_t keep = std::min(ids.size(), static_cast<std::size_t>(T) + 1);
  const int* first = ids.data() + (ids.size() - keep);
  std::fill(inputs, inputs + T, 0);
  std::fill(targets, targets + T, 0);
  for (std::size_t i = 0; i + 1 < keep; ++i) {
    inputs[i] = first[i];
    targets[i] = first[i + 1];
  }
}

// The ending's score from its window's per-position losses: its ids are the last targets.
double ending_score(const MultipleChoiceExample& example, std::size_t ending, int T,
                    const float* losses) {
  const std::size_t total = example.context.size() + example.endings[ending].size();
  const std::size_t targets = std::min(total, static_cast<std::size_t>(T) + 1) - 1;
  double score = 0;
  for (std::size_t i = targets - example.endings[ending].size(); i < targets; ++i)
    score -= losses[i];
  return score;
}

// Runs `forward` over the shard's windows and returns the scores of its examples (others empty).
template <class Forward>
std::vector<std::vector<double>> shard_scores(const std::vector<MultipleChoiceExample>& examples,
                                              int T, const EndingWindows& windows,
                                              Forward&& forward) {
  std::vector<std::vector<double>> scores(examples.size());
  for (const auto& [e, k] : windows.at) scores[e].assign(examples[e].endings.size(), 0.0);
  forward(
      [&](std::uint64_t w, std::int32_t* inputs, std::int32_t* targets) {
        fill_ending(examples[windows.at[w].first], windows.at[w].second, T, inputs, targets);
      },
      [&](std::uint64_t w, const float* losses) {
        const auto [e, k] = windows.at[w];
        scores[e][k] = ending_score(examples[e], k, T, losses);
      });
  return scores;
}

}  // namespace

int chosen_ending(const std::vector<double>& scores, const MultipleChoiceExample& example,
                  bool normalised) {
  int best = 0;
  double best_value = 0;
  for (std::size_t k = 0; k < scores.size(); ++k) {
    const double value =
        normalised ? scores[k] / static_cast<double>(example.endings[k].size()) : scores[k];
    if (k == 0 || value > best_value) {
      best = static_cast<int>(k);
      best_value = value;
    }
  }
  return best;
}

MultipleChoiceTally tally_multiple_choice(const std::vector<MultipleChoiceExample>& examples,
                                          const std::vector<std::vector<double>>& scores) {
  MultipleChoiceTally tally;
  for (std::size_t e = 0; e < examples.size(); ++e) {
    if (scores[e].empty()) continue;
    ++tally.examples;
    tally.correct += chosen_ending(scores[e], examples[e], false) == examples[e].label;
    tally.correct_norm += chosen_ending(scores[e], examples[e], true) == examples[e].label;
  }
  return tally;
}

std::vector<std::vector<double>> score_endings(Gpt<float>& model, const float* params,
                                               const std::vector<MultipleChoiceExample>& examples,
                                               int micro_batch) {
  const EndingWindows windows(examples, 0, 1);
  return shard_scores(examples, model.shape().seq_len, windows,
                      [&](const FillWindow& fill, const TakeWindowLosses& take) {
                        forward_windows(model, params,
                                        window_batches(windows.at.size(), micro_batch), fill, take);
                      });
}

MultipleChoiceTally evaluate_multiple_choice(PipelineExecutor& executor,
                                             const std::vector<MultipleChoiceExample>& examples,
                                             int seq_len, int micro_batch, int shard_rank,
                                             int shard_count) {
  // Every shard runs as many passes as the one with the most windows (forward_windows).
  std::size_t passes = 0;
  for (int s = 0; s < shard_count; ++s)
    passes = std::max(
        passes,
        window_batches(EndingWindows(examples, s, shard_count).at.size(), micro_batch).size());
  const EndingWindows windows(examples, shard_rank, shard_count);
  // Only the last stage sees losses; the others' scores stay zeros and must not be counted.
  bool took = false;
  const auto scores = shard_scores(
      examples, seq_len, windows, [&](const FillWindow& fill, const TakeWindowLosses& take) {
        forward_windows(executor, seq_len, window_batches(windows.at.size(), micro_batch), passes,
                        fill, [&](std::uint64_t w, const float* losses) {
                          took = true;
                          take(w, losses);
                        });
      });
  return took ? tally_multiple_choice(examples, scores) : MultipleChoiceTally{};
}

}  // namespace strata
