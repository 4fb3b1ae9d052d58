// eval --checkpoint CKPT --data PATH [--tokens N] [--logits FILE.npy]
// Prints one line `val_loss <float>`: the mean cross-entropy over the first N tokens of PATH (the
// windows of docs/ARCHITECTURE.md §5; N defaults to the run's train.eval_tokens). --logits also
// writes the logits of those windows (tools/eval_logits.h).
#include <cstdio>
#include <iostream>

#include "data/sha256.h"
#include "data/token_shards.h"
#include "tools/eval_logits.h"
#include "tools/tool_args.h"
#include "train/checkpoint/saved_model.h"
#include "train/evaluate.h"

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: eval --checkpoint CKPT --data PATH [--tokens N] [--logits FILE.npy]";
  try {
    const strata::ToolArgs args(argc, argv, 1, {"--checkpoint", "--data", "--tokens", "--logits"},
                                kUsage);
    const std::string checkpoint = args.required("--checkpoint", kUsage);
    const std::string data = args.required("--data", kUsage);
    strata::SavedModel saved = strata::load_saved_model(checkpoint, 0);
    const int micro_batch = saved.config.train.micro_batch;
    const long long tokens = args.integer("--tokens", saved.config.train.eval_tokens);
    if (tokens < 2) strata::fail("--tokens must be at least 2, got ", tokens);
    const strata::TokenSource split = strata::TokenSource::open(data);
    if (split.info().vocab_size > saved.config.model.vocab_size)
      strata::fail("--data: the shards use a vocabulary of ", split.info().vocab_size,
                   " tokens but the model has ", saved.config.model.vocab_size);
    if (!saved.tokenizer_model.empty())
      strata::check_shards_tokenizer(split, strata::sha256_hex(saved.tokenizer_model), "--data");
    // On stderr: stdout is the one val_loss line that scripts read.
    if (const std::string note = strata::missing_checksums_note({{"--data", &split}});
        !note.empty())
      std::cerr << note << std::endl;
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
