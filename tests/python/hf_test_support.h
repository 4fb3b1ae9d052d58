// What the Hugging Face drivers (hf_gpt2_test.cpp, hf_llama_test.cpp) share: a small
// SentencePiece-tokenized corpus, a model trained on it for 10 steps, and `eval --logits` over
// the first tokens of its validation split, which the Python scripts compare transformers with.
// Each step throws (a failed test, with the command's output) when its command fails.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "data/token_shards.h"
#include "tests/support/test_support.h"

namespace strata::testing {

// The project's Python with transformers and PyTorch (scripts/setup_python.sh makes it).
inline std::string venv_python() {
  const std::string python = source_dir() + "/.venv-test/bin/python";
  if (!std::filesystem::exists(python))
    throw std::runtime_error(python +
                             " is missing: run scripts/setup_python.sh (it makes .venv-test, with "
                             "transformers and PyTorch from PyPI, which this test loads the "
                             "exported model with)");
  return python;
}

// The output of `command`; throws with it when the command fails.
inline std::string run_or_throw(const std::string& command) {
  const CommandResult result = run_command(command);
  if (result.status != 0)
    throw std::runtime_error("command failed: " + command + "\n" + result.output);
  return result.output;
}

// DIR/data/{train,val,tokenizer.model}: text of a small vocabulary of words, tokenized into 300
// pieces.
inline void write_tokenized_corpus(const TempDir& dir) {
  std::filesystem::create_directories(dir / "docs");
  const char* words[] = {"the",   "quick",  "brown",  "fox",   "jumps",  "over",  "lazy",
                         "dog",   "strata", "trains", "small", "models", "on",    "text",
                         "every", "day",    "layers", "learn", "fast",   "slowly"};
  std::mt19937_64 rng(11);
  std::string inputs;
  for (int d = 0; d < 40; ++d) {
    const std::string path = dir / ("docs/doc" + std::to_string(d) + ".txt");
    std::ofstream out(path);
    for (int w = 0; w < 400; ++w) out << words[rng() % 20] << (w % 17 == 16 ? ".\n" : " ");
    inputs += " " + path;
  }
  run_or_throw(bin("tokenize") + " --input" + inputs + " --out " + (dir / "data") +
               " --vocab-size 300");
}

// Trains `model` (a YAML mapping of model keys) 10 steps on the corpus: the last checkpoint.
inline std::string train_ten_steps(const TempDir& dir, const std::string& model) {
  const std::string config = dir / "run.yaml";
  std::ofstream(config) << "run: {name: hf, dir: " << dir.str() << "/runs, seed: 5}\n"
                        << "model: " << model << "\n"
                        << "data: {train: " << dir.str() << "/data/train, tokenizer: " << dir.str()
                        << "/data/tokenizer.model}\n"
                        << "optimizer: {lr: 3.0e-3, warmup_steps: 2}\n"
                        << "train: {steps: 10, global_batch: 8, micro_batch: 4, eval_every: 0}\n"
                        << "checkpoint: {every: 0, keep: 0}\n"
                        << "device: cpu\n";
  run_or_throw(bin("train") + " " + config);
  return dir / "runs/hf/checkpoints/step_00000010.h5";
}

// The first 1024 tokens of the validation split to DIR/tokens.i32 (int32), for the scripts'
// windows: their count.
inline std::size_t write_val_tokens(const TempDir& dir) {
  const TokenSource val = TokenSource::open(dir / "data/val");
  const std::size_t n_tokens = std::min<std::size_t>(1024, val.size());
  if (n_tokens < 18) throw std::runtime_error("the validation split is too short");
  std::vector<std::int32_t> tokens(n_tokens);
  val.read(0, n_tokens, tokens.data());
  std::ofstream(dir / "tokens.i32", std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(std::int32_t)));
  return n_tokens;
}

// `eval --logits DIR/logits.npy` of `checkpoint` over those tokens: the val_loss it printed.
inline std::string eval_with_logits(const TempDir& dir, const std::string& checkpoint,
                                    std::size_t n_tokens) {
  const std::string output =
      run_or_throw(bin("eval") + " --checkpoint " + checkpoint + " --data " + (dir / "data/val") +
                   " --tokens " + std::to_string(n_tokens) + " --logits " + (dir / "logits.npy"));
  const auto at = output.find("val_loss ");
  if (at == std::string::npos) throw std::runtime_error("eval printed no val_loss: " + output);
  return output.substr(at + 9, output.find(' ', at + 9) - at - 9);
}

}  // namespace strata::testing
