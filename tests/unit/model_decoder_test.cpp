// Incremental decoding against the full forward: the decoder's logits after a prefill and after
// each appended position (one or several at a time) are the full forward's for the last position,
// and generation with the KV cache draws the same tokens as rerunning the whole window, across
// window slides, greedy and sampled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "model/gpt.h"
#include "model/gpt_decoder.h"
#include "model/gpt_generation.h"
#include "tests/support/model_shapes.h"

namespace strata {
namespace {

// seq_len 16: 40 generated tokens slide the window several times.
const GptShape kShape{2, 2, 16, 16, 50};

// Random parameters, spread wide enough that the logits of a position are far apart (greedy
// choices are not decided by rounding), LayerNorm gains near 1. `biases` false zeroes the biases:
// random ones add the same offsets at every position, and the final LayerNorm's then makes the
// tied head repeat one or two tokens, which would compare generation on few distinct windows.
template <class T>
std::vector<T> random_params(const Gpt<T>& model, std::uint64_t seed, bool biases = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.5);
  std::vector<T> params(model.layout().total());
  for (T& p : params) p = static_cast<T>(normal(rng));
  for (const TensorView& t : model.layout().tensors()) {
    if (t.shape.size() == 1 && t.name.ends_with(".weight"))
      for (std::size_t i = 0; i < t.size; ++i) params[t.offset + i] += T(1);
    if (!biases && t.name.ends_with(".bias"))
      std::fill_n(params.begin() + static_cast<long>(t.offset), t.size, T(0));
  }
  return params;
}

std::vector<std::int32_t> random_tokens(int n, int vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % vocab);
  return tokens;
}

// The largest |decoder − full forward| over the real vocabulary, relative to the largest |logit|,
// for every prefix of a seq_len sequence fed as a prefill of `first` positions, then `step` at a
// time.
template <class T>
double largest_relative_difference(int first, int step, const GptShape& shape = kShape) {
  Gpt<T> model(shape, 1);
  const std::vector<T> params = random_params(model, 5);
  const std::vector<std::int32_t> tokens = random_tokens(shape.seq_len, shape.vocab_size, 6);
  GptDecoder<T> decoder(model, params.data());
  double largest = 0;
  for (int end = first; end <= shape.seq_len; end += step) {
    const int begin = decoder.length();
    const T* cached = decoder.append(tokens.data() + begin, end - begin);
    EXPECT_EQ(decoder.length(), end);
    model.forward(params.data(), tokens.data(), nullptr, 1, end);
    const T* full = model.logits() + static_cast<std::size_t>(end - 1) * shape.padded_vocab();
    double difference = 0, scale = 0;
    for (int v = 0; v < shape.vocab_size; ++v) {
      difference = std::max(difference, std::abs(double(cached[v]) - double(full[v])));
      scale = std::max(scale, std::abs(double(full[v])));
    }
    EXPECT_GT(scale, 0.1) << "logits too small to compare";
    largest = std::max(largest, difference / scale);
  }
  return largest;
}

TEST(Decoder, LogitsMatchTheFullForwardAtEveryPosition) {
  // A prefill of 5, then one position at a time (generation), then several at a time.
  EXPECT_LT(largest_relative_difference<float>(5, 1), 1e-5);
  EXPECT_LT(largest_relative_difference<float>(1, 3), 1e-5);
  EXPECT_LT(largest_relative_difference<float>(kShape.seq_len, 1), 1e-5);  // one whole prefill
  // In double the two differ by rounding only.
  EXPECT_LT(largest_relative_difference<double>(5, 1), 1e-12);
  EXPECT_LT(largest_relative_difference<double>(2, 5), 1e-12);
}

// Experts in both blocks, dropless (decoding routes every token: no capacity to compete for), so
// the full forward routes the same; GPT-2's experts, and SwiGLU experts without biases in the
// Llama-style block.
TEST(Decoder, ExpertBlocksMatchTheFullForward) {
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.capacity_factor = 0;
  const GptShape shape(kShape.n_layer, kShape.n_head, kShape.d_model, kShape.seq_len,
                       kShape.vocab_size, moe);
  EXPECT_LT(largest_relative_difference<float>(5, 1, shape), 1e-5);
  EXPECT_LT(largest_relative_difference<double>(2, 5, shape), 1e-12);
  const GptShape llama = testing::llama_shape(shape, 24, 1, 50.0);
  EXPECT_LT(largest_relative_difference<float>(5, 1, llama), 1e-5);
  EXPECT_LT(largest_relative_difference<double>(2, 5, llama), 1e-12);
}

// The Llama-style block: RoPE turns each new row's q and k at its position (the cached keys keep
// theirs), grouped-query attention caches kv_heads of the heads (a smaller cache), RMSNorm,
// SwiGLU, the untied head.
TEST(Decoder, LlamaBlockMatchesTheFullForward) {
  const GptShape shape = testing::llama_shape(kShape, 24, 1, 50.0);
  EXPECT_LT(largest_relative_difference<float>(5, 1, shape), 1e-5);
  EXPECT_LT(largest_relative_difference<float>(1, 3, shape), 1e-5);
  EXPECT_LT(largest_relative_difference<double>(2, 5, shape), 1e-12);
}

TEST(Decoder, ResetStartsAFreshSequence) {
  Gpt<float> model(kShape, 1);
  const std::vector<float> params = random_params(model, 7);
  const std::vector<std::int32_t> tokens = random_tokens(6, kShape.vocab_size, 8);
  GptDecoder<float> decoder(model, params.data());
  const float* logits = decoder.append(tokens.data(), 6);
  const std::vector<float> first(logits, logits + kShape.padded_vocab());
  decoder.append(tokens.data(), 3);  // other positions: other logits
  decoder.reset();
  EXPECT_EQ(decoder.length(), 0);
  logits = decoder.append(tokens.data(), 6);
  EXPECT_EQ(std::vector<float>(logits, logits + kShape.padded_vocab()), first);
}

std::vector<int> generate(Gpt<float>& model, const std::vector<float>& params,
                          const std::vector<int>& prompt, double temperature, Decoding decoding) {
  GenerationOptions options;
  options.max_tokens = 40;
  options.sampling = {temperature, 5, 3};
  options.decoding = decoding;
  std::vector<int> seen;
  const std::vector<int> generated =
      generate_tokens(model, params.data(), prompt, options, [&](int id) { seen.push_back(id); });
  EXPECT_EQ(seen, generated) << "on_token sees every id as it is drawn";
  return generated;
}

TEST(Generation, CacheDrawsTheFullForwardsTokensAcrossWindowSlides) {
  Gpt<float> model(kShape, 1);
  // Seed 7's model draws 15 to 20 distinct tokens of 40 in each case below (measured; a random
  // model's greedy text can also cycle through two or three, as seed 9's does).
  const std::vector<float> params = random_params(model, 7, false);
  // A short prompt (the window fills and halves three times in 40 tokens) and one longer than
  // the window (its last seq_len tokens, then a slide at the first generated token).
  const std::vector<int> short_prompt = {3, 17, 42};
  std::vector<int> long_prompt;
  for (std::int32_t t : random_tokens(kShape.seq_len + 4, kShape.vocab_size, 10))
    long_prompt.push_back(t);
  for (const std::vector<int>& prompt : {short_prompt, long_prompt}) {
    for (const double temperature : {0.0, 0.8}) {
      SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + " tokens, temperature " +
                   std::to_string(temperature));
      const std::vector<int> cached =
          generate(model, params, prompt, temperature, Decoding::cached);
      const std::vector<int> full =
          generate(model, params, prompt, temperature, Decoding::full_forward);
      ASSERT_EQ(cached.size(), 40u);
      EXPECT_EQ(cached, full);
      // Not a token or two repeated: the comparison covers varied windows.
      EXPECT_GE(std::set<int>(cached.begin(), cached.end()).size(), 8u);
    }
  }
}

TEST(Generation, StopsAtTheStopIdWithoutReturningIt) {
  Gpt<float> model(kShape, 1);
  const std::vector<float> params = random_params(model, 9, false);
  GenerationOptions options;
  options.max_tokens = 40;
  options.sampling.temperature = 0;
  const std::vector<int> greedy = generate_tokens(model, params.data(), {3, 17, 42}, options);
  ASSERT_GE(greedy.size(), 5u);
  options.stop_id = greedy[4];
  const std::vector<int> stopped = generate_tokens(model, params.data(), {3, 17, 42}, options);
  const auto first_stop = std::find(greedy.begin(), greedy.end(), greedy[4]);
  EXPECT_EQ(stopped, std::vector<int>(greedy.begin(), first_stop));
}

}  // namespace
}  // namespace strata
