// A model restored from a checkpoint for the tools (eval, generate, ckpt inspect): the run's
// config, the GPT built from it, its parameters and the tokenizer stored with it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "plan/config.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {

struct SavedModel {
  Config config;
  CheckpointState state;
  std::unique_ptr<Gpt<float>> model;
  std::vector<float> params;
  std::string tokenizer_model;     // serialized SentencePiece model; empty if the run had none
  bool without_tokenizer = false;  // trained on ids converted without a tokenizer
};

// max_batch: the most sequences one forward will hold (0: the run's train.micro_batch).
SavedModel load_saved_model(const std::string& checkpoint_path, int max_batch);

}  // namespace strata
