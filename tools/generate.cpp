// generate --checkpoint CKPT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S]
//          [--threads N]
// Samples a continuation of TEXT with the run's tokenizer (stored in the checkpoint) and prints
// the prompt and the continuation as one text, token by token as they are drawn (stdout flushed
// at each). Temperature 0 is greedy decoding; sampling stops at N tokens or at the
// end-of-document token. Each draw is a pure function of (seed, its index), so a seed reproduces
// its text. The model runs on the CPU with a KV cache (model/gpt_decoder.h) under the context
// window of model/gpt_generation.h, on the threads of tools/tool_threads.h (a small model's
// token is too little work to split). The text ends with one newline (added unless its last
// character is one). At the end one line on stderr gives the speed in tokens/s.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <vector>

#include "data/text_stream.h"
#include "data/tokenizer.h"
#include "model/core/command_line.h"
#include "model/gpt_generation.h"
#include "tools/tool_threads.h"
#include "train/checkpoint/saved_model.h"

namespace {

const strata::CommandSpec kCommand{
    "usage: generate --checkpoint CKPT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] "
    "[--seed S] [--threads N]",
    "Samples a continuation of TEXT with the checkpoint's model and tokenizer on the CPU and "
    "prints the prompt and the continuation as they are drawn, ending with a newline; the speed "
    "goes to stderr. A seed reproduces its text.",
    {
        {"--checkpoint", "CKPT", "", "a checkpoint written by train or ckpt import-hf", "", true},
        {"--prompt", "TEXT", "", "the text to continue; empty starts a new document", "", true},
        {"--tokens", "N", "64", "tokens drawn at most (fewer at the end-of-document token)"},
        {"--temperature", "T", "0.8", "softmax temperature; 0 is greedy decoding"},
        {"--top-k", "K", "40", "draw among the K likeliest tokens; 0 among all"},
        {"--seed", "S", "1", "the draws' seed"},
        {"--threads", "N", "", "CPU threads",
         "OMP_NUM_THREADS, else one per 50 MFLOP of a token's work, at most the cores; 1 for "
         "small models"},
    },
};

}  // namespace

int main(int argc, char** argv) {
  strata::passive_openmp_wait(argv);
  try {
    const strata::ToolArgs args(argc, argv, 1, kCommand);
    const std::string checkpoint = args.get("--checkpoint");
    const std::string prompt = args.get("--prompt");
    const long long n_tokens = args.integer("--tokens");
    const double temperature = args.number("--temperature");
    const long long top_k = args.integer("--top-k");
    const long long seed = args.integer("--seed");
    if (n_tokens < 1) strata::fail("--tokens must be at least 1, got ", n_tokens);
    if (temperature < 0) strata::fail("--temperature must be >= 0, got ", temperature);
    if (top_k < 0) strata::fail("--top-k must be >= 0, got ", top_k);

    strata::SavedModel saved = strata::load_saved_model(checkpoint, 1);
    if (saved.without_tokenizer)
      strata::fail("checkpoint '", checkpoint,
                   "' was trained on token shards without a tokenizer (tokenizer_sha256 \"none\", "
                   "from tokenize --from-tokens): generate has no tokenizer to turn text into its "
                   "ids and back");
    const int threads =
        strata::set_tool_threads(args, 2.0 * static_cast<double>(saved.params.size()));
    strata::Tokenizer tokenizer = [&] {
      if (!saved.tokenizer_model.empty())
        return strata::Tokenizer::from_serialized(saved.tokenizer_model);
      if (!saved.config.data.tokenizer.empty())
        return strata::Tokenizer::load(saved.config.data.tokenizer);
      strata::fail("checkpoint '", checkpoint, "' has no tokenizer and its config names none");
    }();
    const strata::GptShape& shape = saved.model->shape();
    if (tokenizer.vocab_size() > shape.vocab_size)
      strata::fail("the tokenizer has ", tokenizer.vocab_size(), " tokens but the model only ",
                   shape.vocab_size);

    std::vector<int> context = tokenizer.encode(prompt);
    if (context.empty()) context.push_back(tokenizer.eos_id());  // start of a new document
    strata::GenerationOptions options;
    options.max_tokens = n_tokens;
    options.sampling = {temperature, static_cast<int>(top_k), static_cast<std::uint64_t>(seed)};
    options.vocab = std::min(shape.vocab_size, tokenizer.vocab_size());
    options.stop_id = tokenizer.eos_id();

    // The prompt and the continuation are decoded as one text (a continuation decoded alone
    // would lose the space that separates it from the prompt).
    strata::TextStream text(tokenizer);
    bool ends_line = false;  // the text so far ends with '\n'
    auto print = [&](const std::string& piece) {
      if (piece.empty()) return;
      std::cout << piece << std::flush;
      ends_line = piece.back() == '\n';
    };
    print(text.append(context));
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int> generated =
        strata::generate_tokens(*saved.model, saved.params.data(), context, options,
                                [&](int id) { print(text.append(id)); });
    print(text.finish());
    if (!ends_line) std::cout << '\n';
    std::cout << std::flush;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[160];
    std::snprintf(line, sizeof line, "generated %zu tokens in %.2f s on %d thread%s: %.1f tokens/s",
                  generated.size(), seconds, threads, threads == 1 ? "" : "s",
                  seconds > 0 ? static_cast<double>(generated.size()) / seconds : 0.0);
    std::cerr << line << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
