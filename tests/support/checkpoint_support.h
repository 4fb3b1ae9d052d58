// Shared by tests that need a checkpoint file (and a tokenizer to store in it) without a
// training run.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/parameter_layout.h"
#include "train/checkpoint.h"
#include "plan/config.h"

namespace strata::testing {

// A step-7 checkpoint of a model of `shape` with parameters `params` (ParameterLayout::for_gpt
// order) and the tokenizer bytes `tokenizer`, written into `dir`; returns its path.
inline std::string write_strata_checkpoint(const std::string& dir, const GptShape& shape,
                                           const std::vector<float>& params,
                                           const std::string& tokenizer = "") {
  Config config;
  config.model = {shape.n_layer, shape.n_head, shape.d_model, shape.seq_len, shape.vocab_size};
  config.data.train = "unused";
  Checkpoint ckpt;
  ckpt.config_yaml = config_to_yaml(config);
  ckpt.state.step = 7;
  ckpt.params = params;
  ckpt.tokenizer_model = tokenizer;
  return write_checkpoint(dir, shape, ParameterLayout::for_gpt(shape), ckpt);
}

// A SentencePiece model of `vocab` pieces, trained on a few repetitive documents of the words
// alpha, beta, gamma, delta, epsilon, zeta, theta, kappa.
inline Tokenizer small_tokenizer(int vocab) {
  std::vector<std::string> documents;
  const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"};
  std::mt19937_64 rng(3);
  for (int d = 0; d < 20; ++d) {
    std::string text;
    for (int w = 0; w < 200; ++w) text += std::string(words[rng() % 8]) + " ";
    documents.push_back(text);
  }
  return train_tokenizer(documents, vocab, 1);
}

}  // namespace strata::testing
