// RunEvaluator (trainer_state.h): a run's evaluation: the validation losses over the first
// eval_tokens of data.val or of each source's val, weighted by the sources' shares, and the
// multiple-choice accuracy of train.eval_multiple_choice (docs/ARCHITECTURE.md §5 "Evaluation").
#include <cstdio>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/core/error.h"
#include "train/evaluate.h"
#include "train/multiple_choice.h"
#include "train/trainer_state.h"

namespace strata {

RunEvaluator::RunEvaluator(RunCore& core) : core_(core) {
  const Config& config = core.config;
  const std::string& path = config.train.eval_multiple_choice;
  if (path.empty()) return;
  const Tokenizer tokenizer =
      Tokenizer::from_serialized(core.tokenizer_model, config.data.tokenizer);
  if (tokenizer.vocab_size() > config.model.vocab_size)
    fail("train.eval_multiple_choice: data.tokenizer has ", tokenizer.vocab_size(),
         " tokens but the model only ", config.model.vocab_size);
  multiple_choice_ = read_multiple_choice(path, tokenizer, config.model.seq_len);
}

double RunEvaluator::validation_loss(const TokenSource& split, const std::string& key) {
  const Config& config = core_.config;
  const int T = config.model.seq_len;
  const LossSum local =
      evaluate_loss(core_.backend->evaluator(), split, config.train.eval_tokens, T,
                    config.train.micro_batch, core_.mesh.dp_rank(), core_.mesh.dp_size(),
                    ContextChunks{core_.mesh.cp_size(), core_.mesh.cp_rank()});
  // The sums arrive on the last stage of every replica, each context rank's of its rows.
  double totals[2] = {local.sum, static_cast<double>(local.count)};
  core_.groups.pp().all_reduce_sum(totals, 2);
  core_.groups.dp_cp().all_reduce_sum(totals, 2);
  if (totals[1] == 0) fail(key, " has too few tokens for one evaluation window of ", T + 1);
  return totals[0] / totals[1];
}

MultipleChoiceTally RunEvaluator::multiple_choice_tally() {
  const Config& config = core_.config;
  const MultipleChoiceTally local = evaluate_multiple_choice(
      core_.backend->evaluator(), multiple_choice_, config.model.seq_len, config.train.micro_batch,
      core_.mesh.dp_rank(), core_.mesh.dp_size());
  // The tallies arrive on the last stage of every replica; counts are exact in a double.
  double totals[3] = {static_cast<double>(local.examples), static_cast<double>(local.correct),
                      static_cast<double>(local.correct_norm)};
  core_.groups.pp().all_reduce_sum(totals, 3);
  core_.groups.dp().all_reduce_sum(totals, 3);
  return {static_cast<std::int64_t>(totals[0]), static_cast<std::int64_t>(totals[1]),
          static_cast<std::int64_t>(totals[2])};
}

void RunEvaluator::evaluate(MetricsWriter* metrics) {
  const TrainingData& data = core_.data;
  if (!data.evaluates() && multiple_choice_.empty()) return;
  const std::vector<double> weights = data.evaluation_weights();
  JsonLine by_source;
  std::string by_source_text;
  double mixed = 0;
  for (std::size_t s = 0; s < data.sources().size(); ++s) {
    const TrainingData::Source& source = data.sources()[s];
    if (!source.val) continue;
    const double loss = validation_loss(*source.val, source.key + ".val");
    mixed += weights[s] * loss;
    by_source.add(source.name, loss);
    char number[32];
    std::snprintf(number, sizeof number, " %.4f", loss);
    by_source_text += (by_source_text.empty() ? "" : ", ") + source.name + number;
  }
  const double val_loss = data.val() ? validation_loss(*data.val(), "data.val") : mixed;
  const MultipleChoiceTally choice =
      multiple_choice_.empty() ? MultipleChoiceTally{} : multiple_choice_tally();
  if (!core_.is_logger()) return;
  JsonLine line;
  line.add("step", core_.progress.step);
  std::string text = "eval step " + std::to_string(core_.progress.step);
  char number[96];
  if (data.evaluates()) {
    std::snprintf(number, sizeof number, " | val_loss %.4f", val_loss);
    text += number + (by_source_text.empty() ? "" : " | by source: " + by_source_text);
    line.add("val_loss", val_loss);
    if (!by_source_text.empty()) line.add("val_loss_by_source", by_source);
  }
  if (choice.examples > 0) {
    std::snprintf(number, sizeof number, " | mc_acc %.4f mc_acc_norm %.4f over %lld examples",
                  choice.accuracy(), choice.accuracy_norm(),
                  static_cast<long long>(choice.examples));
    text += number;
    line.add("mc_acc", choice.accuracy()).add("mc_acc_norm", choice.accuracy_norm());
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (metrics != nullptr) metrics->write(line);
}

}  // namespace strata
