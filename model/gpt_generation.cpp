#include "model/gpt_generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "model/core/counter_rng.h"
#include "model/core/error.h"
#include "model/gpt_decoder.h"

namespace strata {

int sample_token(const float* logits, int vocab, const SamplingOptions& sampling,
                 std::uint64_t draw) {
  if (sampling.temperature <= 0)
    return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int keep = (sampling.top_k > 0 && sampling.top_k < vocab) ? sampling.top_k : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> weights(static_cast<std::size_t>(keep));
  double total = 0;
  for (int i = 0; i < keep; ++i) {
    weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / sampling.temperature);
    total += weights[i];
  }
  const std::uint64_t key = hash_combine(sampling.seed, hash_name("generate"));
  double u = uniform_open01(hash_combine(key, draw)) * total;
  for (int i = 0; i < keep; ++i) {
    u -= weights[i];
    if (u <= 0) return order[i];
  }
  return order[keep - 1];
}

namespace {

// The logits of the token after a window, by either decoding: the one object that knows which.
class NextTokenLogits {
 public:
  NextTokenLogits(Gpt<float>& model, const float* params, Decoding decoding)
      : model_(model), params_(params) {
    if (decoding == Decoding::cached) decoder_.emplace(model, params);
  }
  // After `window` from scratch: a prefill into an empty cache.
  const float* restart(const std::vector<std::int32_t>& window) {
    if (!decoder_) return full_forward(window);
    decoder_->reset();
    return decoder_->append(window.data(), static_cast<int>(window.size()));
  }
  // After `window`, the previous window with one more token at its end.
  const float* extend(const std::vector<std::int32_t>& window) {
    if (!decoder_) return full_forward(window);
    return decoder_->append(&window.back(), 1);
  }

 private:
  const float* full_forward(const std::vector<std::int32_t>& window) {
    const int T_ = static_cast<int>(window.size());
    model_.forward(params_, window.data(), nullptr, 1, T_);
    return model_.logits() + static_cast<std::size_t>(T_ - 1) * model_.shape().padded_vocab();
  }

  Gpt<float>& model_;
  const float* params_;
  std::optional<GptDecoder<float>> decoder_;
};

}  // namespace

std::vector<int> generate_tokens(Gpt<float>& model, const float* params,
                                 const std::vector<int>& prompt, const GenerationOptions& options,
                                 const std::function<void(int)>& on_token) {
  STRATA_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  const std::size_t seq_len = static_cast<std::size_t>(model.shape().seq_len);
  const int vocab = options.vocab > 0 ? options.vocab : model.shape().vocab_size;
  STRATA_CHECK(vocab <= model.shape().vocab_size);
  std::vector<int> generated;
  if (options.max_tokens < 1) return generated;
  NextTokenLogits next_logits(model, params, options.decoding);
  const std::size_t start = prompt.size() > seq_len ? prompt.size() - seq_len : 0;
  std::vector<std::int32_t> window(prompt.begin() + static_cast<long>(start), prompt.end());
  const float* logits = next_logits.restart(window);
  for (long long i = 0;; ++i) {
    const int next = sample_token(logits, vocab, options.sampling, static_cast<std::uint64_t>(i));
    if (next == options.stop_id) break;
    generated.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == options.max_tokens) break;  // no logits nobody draws from
    if (window.size() < seq_len) {
      window.push_back(next);
      logits = next_logits.extend(window);
    } else {  // full: keep the last half, then the new token; rebuild the cache from them
      window.erase(window.begin(), window.end() - static_cast<long>(seq_len / 2));
      window.push_back(next);
      logits = next_logits.restart(window);
    }
  }
  return generated;
}

}  // namespace strata
