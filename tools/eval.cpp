// eval --checkpoint CKPT [--data PATH] [--tokens N] [--logits FILE.npy]
//      [--gradients FILE.safetensors] [--multiple-choice FILE.jsonl] [--scores FILE.jsonl]
//      [--threads N]
// With --data, one line `val_loss <float> over M tokens in W windows (...)`: the mean
// cross-entropy over the first N tokens of PATH (the windows of docs/ARCHITECTURE.md §5, M their
// targets), saying where N came from (--tokens, the run's train.eval_tokens, or the default where
// the checkpoint was imported by `ckpt import-hf` and so records no run's);
// --logits also writes the logits of those windows (tools/eval_logits.h), --gradients the gradient
// of val_loss with respect to every parameter (tools/eval_gradients.h). With --multiple-choice,
// one line `mc_acc A mc_acc_norm B over N examples` (train/multiple_choice.h), and --scores writes
// each example's token ids and ending scores, one JSON object a line. Threads:
// tools/tool_threads.h.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "data/sha256.h"
#include "data/token_shards.h"
#include "model/core/command_line.h"
#include "tools/eval_gradients.h"
#include "tools/eval_logits.h"
#include "tools/tool_threads.h"
#include "train/checkpoint/saved_model.h"
#include "train/evaluate.h"
#include "train/metrics/metrics.h"
#include "train/multiple_choice.h"

namespace {

void print_val_loss(const strata::ToolArgs& args, strata::SavedModel& saved) {
  const std::string data = args.get("--data");
  const int micro_batch = saved.config.train.micro_batch;
  const long long tokens =
      args.has("--tokens") ? args.integer("--tokens") : saved.config.train.eval_tokens;
  if (tokens < 2) strata::fail("--tokens must be at least 2, got ", tokens);
  const strata::TokenSource split = strata::TokenSource::open(data);
  // Legal, but the user surely meant a number the split holds: say what is evaluated.
  if (static_cast<std::uint64_t>(tokens) > split.size())
    std::fprintf(stderr,
                 "warning: --data '%s' holds %llu tokens, fewer than the %lld asked for: all of "
                 "them are evaluated\n",
                 data.c_str(), static_cast<unsigned long long>(split.size()), tokens);
  if (split.info().vocab_size > saved.config.model.vocab_size)
    strata::fail("--data: the shards use a vocabulary of ", split.info().vocab_size,
                 " tokens but the model has ", saved.config.model.vocab_size);
  if (!saved.tokenizer_model.empty())
    strata::check_shards_tokenizer(split, strata::sha256_hex(saved.tokenizer_model), "--data");
  // On stderr: stdout is the one val_loss line that scripts read.
  if (const std::string note = strata::missing_checksums_note({{"--data", &split}}); !note.empty())
    std::cerr << note << std::endl;
  const strata::LossSum loss =
      strata::evaluate_loss(*saved.model, saved.params.data(), split, tokens, micro_batch, 0, 1);
  if (loss.count == 0)
    strata::fail("--data '", data, "' has fewer than seq_len+1 = ", saved.config.model.seq_len + 1,
                 " tokens in the first ", tokens);
  if (args.has("--logits"))
    strata::write_eval_logits(args.get("--logits"), *saved.model, saved.params.data(), split,
                              tokens, micro_batch);
  if (args.has("--gradients"))
    strata::write_eval_gradients(
        args.get("--gradients"), saved.model->layout(),
        strata::eval_gradients(*saved.model, saved.params.data(), split, tokens, micro_batch));
  // ckpt import-hf writes the default eval_tokens into the config of a run that never was.
  const bool imported = saved.config.data.train.starts_with("hf-import:");
  const std::string from = args.has("--tokens") ? "from --tokens"
                           : imported ? "the default: a checkpoint of ckpt import-hf records no "
                                        "run's train.eval_tokens"
                                      : "from the checkpoint's train.eval_tokens";
  std::printf(
      "val_loss %.6f over %lld tokens in %lld windows (the first %lld tokens of --data, %s)\n",
      loss.sum / static_cast<double>(loss.count), static_cast<long long>(loss.count),
      static_cast<long long>(loss.count / saved.config.model.seq_len), tokens, from.c_str());
}

// Each example's ids and scores (for a reader that checks them, as tests/python/hf_gpt2.py does).
void write_scores(const std::string& path,
                  const std::vector<strata::MultipleChoiceExample>& examples,
                  const std::vector<std::vector<double>>& scores) {
  std::ofstream out(path);
  if (!out) strata::fail("--scores: cannot write '", path, "'");
  for (std::size_t e = 0; e < examples.size(); ++e) {
    std::vector<strata::JsonLine> endings;
    for (std::size_t k = 0; k < scores[e].size(); ++k)
      endings.push_back(
          strata::JsonLine().add("tokens", examples[e].endings[k]).add("logprob", scores[e][k]));
    out << strata::JsonLine()
               .add("line", examples[e].line)
               .add("label", examples[e].label)
               .add("context", examples[e].context)
               .add("endings", endings)
               .add("chosen", strata::chosen_ending(scores[e], examples[e], false))
               .add("chosen_norm", strata::chosen_ending(scores[e], examples[e], true))
               .str()
        << "\n";
  }
  if (!out) strata::fail("--scores: cannot write '", path, "'");
}

void print_multiple_choice(const strata::ToolArgs& args, strata::SavedModel& saved) {
  if (saved.tokenizer_model.empty())
    strata::fail("--multiple-choice needs the run's tokenizer, which the checkpoint does not hold");
  const strata::Tokenizer tokenizer = strata::Tokenizer::from_serialized(saved.tokenizer_model);
  if (tokenizer.vocab_size() > saved.config.model.vocab_size)
    strata::fail("the tokenizer has ", tokenizer.vocab_size(), " tokens but the model only ",
                 saved.config.model.vocab_size);
  const auto examples = strata::read_multiple_choice(args.get("--multiple-choice"), tokenizer,
                                                     saved.config.model.seq_len);
  const auto scores = strata::score_endings(*saved.model, saved.params.data(), examples,
                                            saved.config.train.micro_batch);
  if (args.has("--scores")) write_scores(args.get("--scores"), examples, scores);
  const strata::MultipleChoiceTally tally = strata::tally_multiple_choice(examples, scores);
  std::printf("mc_acc %.6f mc_acc_norm %.6f over %lld examples\n", tally.accuracy(),
              tally.accuracy_norm(), static_cast<long long>(tally.examples));
}

const strata::CommandSpec kCommand{
    "usage: eval --checkpoint CKPT [--data PATH] [--tokens N] [--logits FILE.npy] "
    "[--gradients FILE.safetensors] [--multiple-choice FILE.jsonl] [--scores FILE.jsonl] "
    "[--threads N]",
    "Evaluates a checkpoint's model in one process. With --data: `val_loss X over N tokens in W "
    "windows (...)`, the mean cross-entropy over the first N tokens of PATH cut into windows of "
    "seq_len+1 tokens (docs/ARCHITECTURE.md §5, Evaluation), saying where N came from. With "
    "--multiple-choice: `mc_acc A mc_acc_norm B over E examples` (§5, Multiple choice).",
    {
        {"--checkpoint", "CKPT", "", "a checkpoint written by train or ckpt import-hf", "", true},
        {"--data", "PATH", "", "token shards (a file, directory or glob): prints val_loss"},
        {"--tokens", "N", "", "tokens of PATH evaluated, at least 2",
         "the checkpoint's train.eval_tokens"},
        {"--logits", "FILE.npy", "", "also write the logits of those windows (float32)"},
        {"--gradients", "FILE.safetensors", "",
         "also write val_loss's gradient, a float32 tensor per checkpoint tensor"},
        {"--multiple-choice", "FILE.jsonl", "",
         "HellaSwag's layout (ctx, endings, label a line): prints mc_acc and mc_acc_norm"},
        {"--scores", "FILE.jsonl", "",
         "with --multiple-choice: write each example's token ids and scores"},
        {"--threads", "N", "", "CPU threads",
         "OMP_NUM_THREADS, else one per 50 MFLOP of a pass, at most the cores"},
    },
    "Multiple choice: every example of the file counts; an ending (tokenized as it reads after "
    "ctx and a space) scores the summed log-likelihood of its tokens after ctx, the context cut "
    "from the left to fit seq_len; mc_acc_norm divides it by the ending's token count; ties "
    "choose the first ending; an empty ending, one over seq_len tokens or a bad line is refused, "
    "naming FILE:LINE."};

}  // namespace

int main(int argc, char** argv) {
  strata::passive_openmp_wait(argv);
  try {
    const strata::ToolArgs args(argc, argv, 1, kCommand);
    const std::string checkpoint = args.get("--checkpoint");
    if (!args.has("--data") && !args.has("--multiple-choice"))
      strata::fail("give --data or --multiple-choice (", kCommand.usage, ")");
    if (args.has("--scores") && !args.has("--multiple-choice"))
      strata::fail("--scores needs --multiple-choice");
    for (const char* flag : {"--logits", "--gradients"})
      if (args.has(flag) && !args.has("--data")) strata::fail(flag, " needs --data");
    strata::SavedModel saved = strata::load_saved_model(checkpoint, 0);
    // A pass is micro_batch windows of seq_len tokens.
    strata::set_tool_threads(args, 2.0 * static_cast<double>(saved.params.size()) *
                                       saved.config.train.micro_batch * saved.config.model.seq_len);
    if (args.has("--data")) print_val_loss(args, saved);
    if (args.has("--multiple-choice")) print_multiple_choice(args, saved);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
