// eval --checkpoint CKPT --data PATH [--tokens N] [--logits FILE.npy]
// Prints one line `val_loss <float>`: the mean cross-entropy over the first N tokens of PATH (the
// windows of docs/ARCHITECTURE.md §5; N defaults to the run's train.eval_tokens). --logits also
// writes the logits of those windows (tools/eval_logits.h).
#include <cstdio>
#include <iostream>

#include "data/sha256.h"
#include "data/token_shards.h"
#include "model/core/command_line.h"
#include "tools/eval_logits.h"
#include "train/checkpoint/saved_model.h"
#include "train/evaluate.h"

namespace {

const strata::CommandSpec kCommand{
    "usage: eval --checkpoint CKPT --data PATH [--tokens N] [--logits FILE.npy]",
    "Prints `val_loss X`: the mean cross-entropy of the checkpoint's model over the first N "
    "tokens of PATH, cut into windows of seq_len+1 tokens (docs/ARCHITECTURE.md §5, "
    "Evaluation).",
    {
        {"--checkpoint", "CKPT", "", "a checkpoint written by train or ckpt import-hf", "", true},
        {"--data", "PATH", "", "token shards: a file, directory or glob", "", true},
        {"--tokens", "N", "", "tokens of PATH evaluated, at least 2",
         "the run's train.eval_tokens"},
        {"--logits", "FILE.npy", "", "also write the logits of those windows (float32)"},
    },
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const strata::ToolArgs args(argc, argv, 1, kCommand);
    const std::string checkpoint = args.get("--checkpoint");
    const std::string data = args.get("--data");
    strata::SavedModel saved = strata::load_saved_model(checkpoint, 0);
    const int micro_batch = saved.config.train.micro_batch;
    const long long tokens =
        args.has("--tokens") ? args.integer("--tokens") : saved.config.train.eval_tokens;
    if (tokens < 2) strata::fail("--tokens must be at least 2, got ", tokens);
    const strata::TokenSource split = strata::TokenSource::open(data);
    if (split.info().vocab_size > saved.config.model.vocab_size)
      strata::fail("--data: the shards use a vocabulary of ", split.info().vocab_size,
                   " tokens but the model has ", saved.config.model.vocab_size);
    if (!saved.tokenizer_model.empty())
      strata::check_shards_tokenizer(split, strata::sha256_hex(saved.tokenizer_model), "--data");
    const strata::LossSum loss =
        strata::evaluate_loss(*saved.model, saved.params.data(), split, tokens, micro_batch, 0, 1);
    if (loss.count == 0)
      strata::fail("--data '", data,
                   "' has fewer than seq_len+1 = ", saved.config.model.seq_len + 1,
                   " tokens in the first ", tokens);
    if (args.has("--logits"))
      strata::write_eval_logits(args.get("--logits"), *saved.model, saved.params.data(), split,
                                tokens, micro_batch);
    std::printf("val_loss %.6f\n", loss.sum / static_cast<double>(loss.count));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
