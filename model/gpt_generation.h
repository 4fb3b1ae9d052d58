// Sampling from a Gpt: the next-token draw and the loop that continues a prompt under the model's
// context window (what `generate` runs).
//
// Draws: temperature 0 is greedy (argmax); otherwise softmax(logits / temperature) over the top_k
// largest logits (0: all), each draw a pure function of (seed, its index), so a seed reproduces
// its text.
//
// The window: the model sees at most seq_len tokens. A prompt longer than that keeps its last
// seq_len; when the window is full and another token must enter, the window keeps its last half
// (seq_len / 2 tokens) first. Positions are learned (wpe), so the keys and values cached for a
// window cannot move with it: the cache is rebuilt from the kept half by one prefill, which
// halving makes happen once per seq_len / 2 tokens rather than at every token.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"

namespace strata {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy
  int top_k = 40;            // 0: the whole vocabulary
  std::uint64_t seed = 1;
};

// The id drawn from `logits` (the first `vocab` entries are real tokens) as draw number `draw`.
int sample_token(const float* logits, int vocab, const SamplingOptions& sampling,
                 std::uint64_t draw);

// How the next token's logits are computed. `cached`: GptDecoder, one prefill per window and one
// position per token. `full_forward`: Gpt::forward over the whole window at every token, the
// reference the cache is tested against.
enum class Decoding { cached, full_forward };

struct GenerationOptions {
  long long max_tokens = 64;
  SamplingOptions sampling;
  int vocab = 0;     // draws are among ids [0, vocab); 0: the model's vocab_size
  int stop_id = -1;  // drawing it ends generation (it is not returned); -1: none
  Decoding decoding = Decoding::cached;
};

// Continues `prompt` (at least one id) with the whole model `model` (one process, built for a
// batch of at least 1) and its parameters: up to max_tokens ids, returned in order;
// `on_token(id)` is called on each as soon as it is drawn.
std::vector<int> generate_tokens(Gpt<float>& model, const float* params,
                                 const std::vector<int>& prompt, const GenerationOptions& options,
                                 const std::function<void(int)>& on_token = {});

}  // namespace strata
