// Hugging Face's transformers reads what `ckpt export-hf` writes and writes what `ckpt import-hf`
// reads: a model trained 10 steps on a SentencePiece-tokenized corpus (300 tokens, padded to 384
// rows in Strata) is exported and evaluated with `eval --logits` and `eval --multiple-choice`;
// tests/python/hf_gpt2.py then compares transformers' logits, loss and ending scores with eval's,
// and imports models that transformers saved. (The Llama family: hf_llama_test.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tests/python/hf_test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(HuggingFace, TransformersReadsTheExportAndWritesWhatImportReads) {
  const std::string python = testing::venv_python();
  testing::TempDir dir("hf_gpt2");
  testing::write_tokenized_corpus(dir);
  const std::string checkpoint = testing::train_ten_steps(
      dir, "{n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 300}");
  testing::run_or_throw(testing::bin("ckpt") + " export-hf " + checkpoint + " " + (dir / "hf"));
  const std::size_t n_tokens = testing::write_val_tokens(dir);
  const std::string val_loss = testing::eval_with_logits(dir, checkpoint, n_tokens);

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
