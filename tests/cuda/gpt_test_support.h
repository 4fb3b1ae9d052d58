// Inputs the CUDA model tests share (tests/cuda/gpt_*_test.cu): GPT-2 parameters with every
// tensor off its initial value, and random token batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "model/parameter_layout.h"

namespace strata::cuda::testing {

struct Batch {
  std::vector<std::int32_t> tokens, targets;  // (B, T)
};

// `rows` = B·T random token ids and targets below vocab_size: all tokens first, then the targets.
inline Batch random_batch(int vocab_size, std::size_t rows, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int32_t> id(0, vocab_size - 1);
  Batch batch{std::vector<std::int32_t>(rows), std::vector<std::int32_t>(rows)};
  for (std::int32_t& t : batch.tokens) t = id(rng);
  for (std::int32_t& t : batch.targets) t = id(rng);
  return batch;
}

inline std::vector<Batch> random_batches(int count, int vocab_size, std::size_t rows,
                                         std::mt19937_64& rng) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) batches.push_back(random_batch(vocab_size, rows, rng));
  return batches;
}

// GPT-2 initialisation with every bias and LayerNorm weight (the tensors without decay) moved off
// its initial 0 or 1, so that a kernel ignoring one, or its gradient, shows.
inline std::vector<float> random_parameters(const GptShape& shape, std::mt19937_64& rng) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::vector<float> params(layout.total());
  initialize_gpt_parameters(layout, shape, rng(), params.data());
  std::uniform_real_distribution<float> offset(-0.05f, 0.05f);
  for (const TensorView& t : layout.tensors())
    if (!t.decay)
      for (std::size_t i = 0; i < t.size; ++i) params[t.offset + i] += offset(rng);
  return params;
}

}  // namespace strata::cuda::testing
