// generate --checkpoint CKPT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S]
// Samples a continuation of TEXT with the run's tokenizer (stored in the checkpoint) and prints
// the prompt followed by the continuation. Temperature 0 is greedy decoding; sampling stops at N
// tokens or at the end-of-document token. Each draw is a pure function of (seed, position), so a
// seed reproduces its text.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <vector>

#include "data/tokenizer.h"
#include "model/core/counter_rng.h"
#include "tools/tool_args.h"
#include "train/saved_model.h"

namespace {

// Picks the next token from one row of logits (the first `vocab` entries are real tokens).
int sample_token(const float* logits, int vocab, double temperature, int top_k, std::uint64_t key,
                 std::uint64_t position) {
  std::vector<int> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  if (temperature <= 0) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  const int keep = (top_k > 0 && top_k < vocab) ? top_k : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> weights(static_cast<std::size_t>(keep));
  double total = 0;
  for (int i = 0; i < keep; ++i) {
    weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
    total += weights[i];
  }
  double u = strata::uniform_open01(strata::hash_combine(key, position)) * total;
  for (int i = 0; i < keep; ++i) {
    u -= weights[i];
    if (u <= 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: generate --checkpoint CKPT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] "
      "[--seed S]";
  try {
    const strata::ToolArgs args(
        argc, argv, 1,
        {"--checkpoint", "--prompt", "--tokens", "--temperature", "--top-k", "--seed"}, kUsage);
    const std::string checkpoint = args.required("--checkpoint", kUsage);
    const std::string prompt = args.required("--prompt", kUsage);
    const long long n_tokens = args.integer("--tokens", 64);
    const double temperature = args.number("--temperature", 0.8);
    const long long top_k = args.integer("--top-k", 40);
    const long long seed = args.integer("--seed", 1);
    if (n_tokens < 1) strata::fail("--tokens must be at least 1, got ", n_tokens);
    if (temperature < 0) strata::fail("--temperature must be >= 0, got ", temperature);
    if (top_k < 0) strata::fail("--top-k must be >= 0, got ", top_k);

    strata::SavedModel saved = strata::load_saved_model(checkpoint, 1);
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
    std::vector<int> generated;
    const std::uint64_t key =
        strata::hash_combine(static_cast<std::uint64_t>(seed), strata::hash_name("generate"));
    std::vector<std::int32_t> window;
    for (long long i = 0; i < n_tokens; ++i) {
      const std::size_t start = context.size() > static_cast<std::size_t>(shape.seq_len)
                                    ? context.size() - shape.seq_len
                                    : 0;
      window.assign(context.begin() + static_cast<long>(start), context.end());
      const int T = static_cast<int>(window.size());
      saved.model->forward(saved.params.data(), window.data(), nullptr, 1, T);
      const float* last =
          saved.model->logits() + static_cast<std::size_t>(T - 1) * shape.padded_vocab();
      const int next =
          sample_token(last, std::min(shape.vocab_size, tokenizer.vocab_size()), temperature,
                       static_cast<int>(top_k), key, static_cast<std::uint64_t>(i));
      if (next == tokenizer.eos_id()) break;
      context.push_back(next);
      generated.push_back(next);
    }
    std::cout << prompt << tokenizer.decode(generated) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
