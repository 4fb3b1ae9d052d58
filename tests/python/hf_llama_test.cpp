// Hugging Face's transformers reads the Llama folders `ckpt export-hf` writes and writes those
// `ckpt import-hf` reads: a Llama-style model (RMSNorm, SwiGLU, RoPE, 2 key/value heads for 4
// query heads, no biases, an untied head) trained 10 steps on a SentencePiece-tokenized corpus is
// exported and evaluated with `eval --logits`; tests/python/hf_llama.py then compares
// LlamaForCausalLM's logits, loss and greedy generation with Strata's, and imports Llama models
// that transformers saved. (The GPT-2 family and what both share: hf_gpt2_test.cpp,
// hf_test_support.h.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/python/hf_test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(HuggingFace, TransformersLlamaReadsTheExportAndWritesWhatImportReads) {
  const std::string python = testing::venv_python();
  testing::TempDir dir("hf_llama");
  testing::write_tokenized_corpus(dir);
  const std::string checkpoint = testing::train_ten_steps(
      dir,
      "{n_layer: 2, n_head: 4, kv_heads: 2, d_model: 32, seq_len: 16, vocab_size: 300, "
      "norm: rmsnorm, mlp: swiglu, position: rope, bias: false, tie_embeddings: false}");
  const std::string exported =
      testing::run_or_throw(testing::bin("ckpt") + " export-hf " + checkpoint + " " + (dir / "hf"));
  EXPECT_NE(exported.find("(Llama, transformers' LlamaForCausalLM; model n_layer 2, n_head 4, "
                          "d_model 32, seq_len 16, vocab_size 300, norm rmsnorm, mlp swiglu, "
                          "position rope, kv_heads 2, bias false, tie_embeddings false)"),
            std::string::npos)
      << exported;
  const std::size_t n_tokens = testing::write_val_tokens(dir);
  const std::string val_loss = testing::eval_with_logits(dir, checkpoint, n_tokens);

  const auto checked = testing::run_command(
      python + " " + testing::source_dir() + "/tests/python/hf_llama.py --bin " +
      fs::path(testing::bin("ckpt")).parent_path().string() + " --work " + dir.str() + " --hf " +
      (dir / "hf") + " --checkpoint " + checkpoint + " --tokens " + (dir / "tokens.i32") +
      " --data " + (dir / "data/val") + " --tokenizer " + (dir / "data/tokenizer.model") +
      " --logits " + (dir / "logits.npy") + " --val-loss " + val_loss +
      " --seq-len 16 --vocab-size 300");
  EXPECT_EQ(checked.status, 0) << checked.output;
  EXPECT_NE(checked.output.find("hf_llama: all checks passed"), std::string::npos)
      << checked.output;
  std::cout << checked.output;
}

}  // namespace
}  // namespace strata
