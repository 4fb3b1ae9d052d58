// Shared by tests that need a checkpoint file (and a tokenizer to store in it) without a
// training run.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/tokenizer.h"
#include "model/parameter_layout.h"
#include "plan/config.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace strata::testing {

// A step-7 checkpoint of a model of `shape` with parameters `params` (ParameterLayout::for_gpt
// order) and the tokenizer bytes `tokenizer`, written into `dir`; returns its path.
inline std::string write_strata_checkpoint(const std::string& dir, const GptShape& shape,
                                           const std::vector<float>& params,
                                           const std::string& tokenizer = "") {
  Config config;
  config.model = model_config_of(shape);
  config.data.train = "unused";
  Checkpoint ckpt;
  ckpt.config_yaml = config_to_yaml(config);
  ckpt.state.step = 7;
  ckpt.params = params;
  ckpt.tokenizer_model = tokenizer;
  return write_checkpoint(dir, shape, ParameterLayout::for_gpt(shape), ckpt);
}

// Turns a checkpoint written now into the strata-checkpoint-3 file an earlier version would have
// written: the formats differ only in the byte checksum (train/checkpoint/checkpoint_format.h), so
// the format attribute, the tokenizer bytes' checksum and the seal are rewritten; the tensors'
// checksums are the same in both.
inline void rewrite_as_format_3(const std::string& path) {
  {
    H5File file = H5File::open_write(path);
    write_attribute_string(file.id(), "format", checkpoint_format_name(CheckpointFormat::v3));
    if (has_object(file.id(), "/tokenizer/model")) {
      const std::vector<std::uint8_t> bytes =
          read_dataset<std::uint8_t>(file.id(), "/tokenizer/model");
      H5Id dataset = open_dataset(file.id(), "/tokenizer/model");
      write_attribute_i64(dataset.get(), "checksum",
                          static_cast<std::int64_t>(
                              checksum_bytes(bytes.data(), bytes.size(), CheckpointFormat::v3)));
    }
    file.close();
  }
  seal_checkpoint_file(path, CheckpointFormat::v3);
}

// The parameters of a model of `shape` that always predicts `target`: with every LayerNorm gain
// zero, the blocks add nothing (their LayerNorms output their zero biases) and the final LayerNorm
// outputs its bias, here the first unit vector, so the tied head's logits are channel 0 of the
// wte rows: 1 for `target`, the others about 0 (normal, stddev 0.02). So `target`'s
// log-probability is about 1 more than any other token's.
inline std::vector<float> always_predicting(const GptShape& shape, int target) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::vector<float> params(layout.total(), 0.0f);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const TensorView& wte = layout.at("wte");
  for (std::size_t i = 0; i < static_cast<std::size_t>(shape.vocab_size) * shape.d_model; ++i)
    params[wte.offset + i] = normal(rng);
  params[wte.offset + static_cast<std::size_t>(target) * shape.d_model] = 1.0f;
  params[layout.at("lnf.bias").offset] = 1.0f;
  return params;
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
