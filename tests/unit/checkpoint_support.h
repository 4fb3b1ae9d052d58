// Shared by tests that need a checkpoint file without a training run.
#pragma once

#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "train/checkpoint.h"
#include "train/config.h"

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

}  // namespace strata::testing
