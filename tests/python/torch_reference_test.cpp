// Strata's fp32 loss and gradients against PyTorch's autograd (tools/torch_reference.py, which
// builds tools/bench_torch.py's model in fp64 and fp32 from the checkpoint, read with h5py): a tiny
// GPT-2 and a tiny Llama-style model (RMSNorm, SwiGLU, RoPE, 2 key/value heads for 4 query heads,
// no biases, an untied head) train 10 steps on synthetic shards, `eval --gradients` writes the
// gradient of its val_loss over 12 windows (one and a half micro-batches), and the reference
// agrees with the loss and with every tensor's gradient to 1e-5 relative (norms).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

void check_against_torch(const std::string& tag, const std::string& model) {
  const std::string python = testing::source_dir() + "/.venv-test/bin/python";
  ASSERT_TRUE(fs::exists(python))
      << python << " is missing: run scripts/setup_python.sh (it makes .venv-test, with PyTorch "
      << "and h5py from PyPI, which tools/torch_reference.py runs on)";
  testing::TempDir dir("torch_reference_" + tag);
  testing::write_synthetic_dataset(dir / "data", 300, 20000);
  const std::string config = dir / "run.yaml";
  std::ofstream(config) << "run: {name: " << tag << ", dir: " << dir.str() << "/runs, seed: 5}\n"
                        << "model: " << model << "\n"
                        << "data: {train: " << dir.str() << "/data/train}\n"
                        << "optimizer: {lr: 3.0e-3, warmup_steps: 2}\n"
                        << "train: {steps: 10, global_batch: 8, micro_batch: 8, eval_every: 0}\n"
                        << "checkpoint: {every: 0, keep: 0}\n"
                        << "device: cpu\n";
  const auto trained =
      testing::run_command("OMP_NUM_THREADS=2 " + testing::bin("train") + " " + config);
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string checkpoint = dir / ("runs/" + tag + "/checkpoints/step_00000010.h5");

  // 12 windows of 16: a micro-batch of 8, then one of 4.
  const std::string tokens = " --tokens 200";
  const auto evaluated = testing::run_command(
      "OMP_NUM_THREADS=2 " + testing::bin("eval") + " --checkpoint " + checkpoint + " --data " +
      (dir / "data/val") + tokens + " --gradients " + (dir / "grads.safetensors"));
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  ASSERT_EQ(evaluated.output.rfind("val_loss ", 0), 0u) << evaluated.output;
  EXPECT_NE(evaluated.output.find(" in 12 windows "), std::string::npos) << evaluated.output;
  const std::string val_loss = evaluated.output.substr(9, evaluated.output.find(' ', 9) - 9);

  const auto checked = testing::run_command(
      python + " " + testing::source_dir() + "/tools/torch_reference.py --checkpoint " +
      checkpoint + " --data " + (dir / "data/val") + tokens + " --val-loss " + val_loss +
      " --gradients " + (dir / "grads.safetensors"));
  EXPECT_EQ(checked.status, 0) << checked.output;
  EXPECT_NE(checked.output.find("torch_reference: all checks passed"), std::string::npos)
      << checked.output;
  std::cout << checked.output;
}

TEST(TorchReference, Gpt2LossAndGradients) {
  check_against_torch("gpt2", "{n_layer: 2, n_head: 4, d_model: 32, seq_len: 16, vocab_size: 300}");
}

TEST(TorchReference, LlamaStyleLossAndGradients) {
  check_against_torch("llama",
                      "{n_layer: 2, n_head: 4, kv_heads: 2, d_model: 32, seq_len: 16, "
                      "vocab_size: 300, norm: rmsnorm, mlp: swiglu, position: rope, bias: false, "
                      "tie_embeddings: false}");
}

}  // namespace
}  // namespace strata
