// Hugging Face's transformers reads what `ckpt export-hf` writes and writes what `ckpt import-hf`
// reads: a model trained 10 steps on a SentencePiece-tokenized corpus (300 tokens, padded to 384
// rows in Strata) is exported and evaluated with `eval --logits` and `eval --multiple-choice`;
// tests/python/hf_gpt2.py then compares transformers' logits, loss and ending scores with eval's,
// and imports models that transformers saved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "data/token_shards.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Text with a small vocabulary of words, so a 300-piece tokenizer trains on it.
void write_documents(const std::string& dir) {
  fs::create_directories(dir);
  const char* words[] = {"the",   "quick",  "brown",  "fox",   "jumps",  "over",  "lazy",
                         "dog",   "strata", "trains", "small", "models", "on",    "text",
                         "every", "day",    "layers", "learn", "fast",   "slowly"};
  std::mt19937_64 rng(11);
  for (int d = 0; d < 40; ++d) {
    std::ofstream out(dir + "/doc" + std::to_string(d) + ".txt");
    for (int w = 0; w < 400; ++w) out << words[rng() % 20] << (w % 17 == 16 ? ".\n" : " ");
  }
}

TEST(HuggingFace, TransformersReadsTheExportAndWritesWhatImportReads) {
  const std::string python = testing::source_dir() + "/.venv-test/bin/python";
  ASSERT_TRUE(fs::exists(python))
      << python << " is missing: run scripts/setup_python.sh (it makes .venv-test, with "
      << "transformers and PyTorch from PyPI, which this test loads the exported model with)";
  testing::TempDir dir("hf_gpt2");
  write_documents(dir / "docs");
  std::string inputs;
  for (int d = 0; d < 40; ++d) inputs += " " + (dir / ("docs/doc" + std::to_string(d) + ".txt"));
  const auto tokenized = testing::run_command(testing::bin("tokenize") + " --input" + inputs +
                                              " --out " + (dir / "data") + " --vocab-size 300");
  ASSERT_EQ(tokenized.status, 0) << tokenized.output;
  const std::string config = dir / "run.yaml";
  std::ofstream(config)
      << "run: {name: hf, dir: " << dir.str() << "/runs, seed: 5}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 300}\n"
      << "data: {train: " << dir.str() << "/data/train, tokenizer: " << dir.str()
      << "/data/tokenizer.model}\n"
      << "optimizer: {lr: 3.0e-3, warmup_steps: 2}\n"
      << "train: {steps: 10, global_batch: 8, micro_batch: 4, eval_every: 0}\n"
      << "checkpoint: {every: 0, keep: 0}\n"
      << "device: cpu\n";
  const auto trained = testing::run_command(testing::bin("train") + " " + config);
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string checkpoint = dir / "runs/hf/checkpoints/step_00000010.h5";

  const auto exported =
      testing::run_command(testing::bin("ckpt") + " export-hf " + checkpoint + " " + (dir / "hf"));
  ASSERT_EQ(exported.status, 0) << exported.output;

  // The first 1024 tokens of the validation split, for the script's windows.
  const TokenSource val = TokenSource::open(dir / "data/val");
  const std::size_t n_tokens = std::min<std::size_t>(1024, val.size());
  ASSERT_GT(n_tokens, 17u);
  std::vector<std::int32_t> tokens(n_tokens);
  val.read(0, n_tokens, tokens.data());
  std::ofstream(dir / "tokens.i32", std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(std::int32_t)));

  const auto evaluated = testing::run_command(
      testing::bin("eval") + " --checkpoint " + checkpoint + " --data " + (dir / "data/val") +
      " --tokens " + std::to_string(n_tokens) + " --logits " + (dir / "logits.npy"));
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  const auto at = evaluated.output.find("val_loss ");
  ASSERT_NE(at, std::string::npos) << evaluated.output;
  const std::string val_loss =
      evaluated.output.substr(at + 9, evaluated.output.find(' ', at + 9) - at - 9);

  // Multiple-choice examples of the corpus's words: endings of 1 or 2 words (the tokens of this
  // 300-piece vocabulary stay within seq_len), every third context past seq_len.
  {
    std::mt19937_64 rng(7);
    const char* words[] = {"the", "quick", "fox", "dog", "on", "text", "day", "fast"};
    auto text = [&](int n) {
      std::string out;
      for (int w = 0; w < n; ++w) out += std::string(w ? " " : "") + words[rng() % 8];
      return out;
    };
    std::ofstream choices(dir / "choices.jsonl");
    for (int e = 0; e < 12; ++e) {
      choices << "{\"ctx\": \"" << text(e % 3 ? 3 : 12) << "\", \"endings\": [";
      for (int k = 0; k < 4; ++k)
        choices << (k ? ", " : "") << "\"" << text(1 + static_cast<int>(rng() % 2)) << "\"";
      choices << "], \"label\": " << e % 4 << "}\n";
    }
  }
  const auto chose = testing::run_command(testing::bin("eval") + " --checkpoint " + checkpoint +
                                          " --multiple-choice " + (dir / "choices.jsonl") +
                                          " --scores " + (dir / "scores.jsonl"));
  ASSERT_EQ(chose.status, 0) << chose.output;
  ASSERT_EQ(chose.output.rfind("mc_acc ", 0), 0u) << chose.output;
  const std::string choice_line = chose.output.substr(0, chose.output.find('\n'));

  const auto checked = testing::run_command(
      python + " " + testing::source_dir() + "/tests/python/hf_gpt2.py --bin " +
      fs::path(testing::bin("ckpt")).parent_path().string() + " --work " + dir.str() + " --hf " +
      (dir / "hf") + " --tokens " + (dir / "tokens.i32") + " --data " + (dir / "data/val") +
      " --tokenizer " + (dir / "data/tokenizer.model") + " --logits " + (dir / "logits.npy") +
      " --val-loss " + val_loss + " --choice-scores " + (dir / "scores.jsonl") +
      " --choice-line \"" + choice_line + "\" --seq-len 16 --vocab-size 300");
  EXPECT_EQ(checked.status, 0) << checked.output;
  EXPECT_NE(checked.output.find("hf_gpt2: all checks passed"), std::string::npos) << checked.output;
  std::cout << checked.output;
}

}  // namespace
}  // namespace strata
