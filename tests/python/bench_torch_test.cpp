// tools/bench_torch.py, the PyTorch reference of `bench train` (scripts/bench_cpu.sh runs it), on
// the CPU with tiny shapes: the default line keeps the keys bench_cpu.sh reads, --sdpa trains the
// same model to the same loss, --config's shape is read with flags overriding it, its Llama-style
// architecture keys too (named in the line; the same loss with either attention), and misuse is
// one `error:` line with a non-zero exit. Its CUDA mode needs a GPU and is not run here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// The last line of a run's output: its JSON record or its `error:` (warnings may come first).
std::string last_line(const std::string& output) {
  const auto end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const auto start = output.rfind('\n', end);
  return output.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start + 1));
}

double final_loss(const std::string& line) {
  const auto at = line.find("\"final_loss\": ");
  return at == std::string::npos ? -1 : std::strtod(line.c_str() + at + 14, nullptr);
}

TEST(BenchTorch, CpuLinesFromFlagsAndConfig) {
  const std::string python = testing::source_dir() + "/.venv-test/bin/python";
  ASSERT_TRUE(fs::exists(python))
      << python << " is missing: run scripts/setup_python.sh (it makes .venv-test, with "
      << "PyTorch from PyPI, which tools/bench_torch.py runs on)";
  const std::string bench = python + " " + testing::source_dir() + "/tools/bench_torch.py" +
                            " --steps 2 --warmup 1 --threads 1 --n-head 2 --d-model 64";
  const std::string tiny = " --n-layer 2 --seq-len 32 --vocab 256";

  const auto plain = testing::run_command(bench + tiny);
  ASSERT_EQ(plain.status, 0) << plain.output;
  const std::string line = last_line(plain.output);
  EXPECT_EQ(line.rfind("{\"bench\": \"train_torch\", \"torch\": ", 0), 0u) << plain.output;
  EXPECT_NE(line.find("\"threads\": 1, \"micro_batch\": 8, \"seq_len\": 32, \"steps\": 2, "
                      "\"step_ms\": "),
            std::string::npos)
      << plain.output;
  EXPECT_NE(line.find("\"peak_rss_mib\": "), std::string::npos) << plain.output;
  EXPECT_EQ(line.find("\"sdpa\""), std::string::npos) << plain.output;
  EXPECT_GT(final_loss(line), 4.0) << plain.output;  // about ln 256 = 5.5 this early

  const auto sdpa = testing::run_command(bench + tiny + " --sdpa");
  ASSERT_EQ(sdpa.status, 0) << sdpa.output;
  EXPECT_NE(sdpa.output.find("\"sdpa\": true"), std::string::npos) << sdpa.output;
  EXPECT_NEAR(final_loss(last_line(sdpa.output)), final_loss(line), 2e-3) << sdpa.output;

  testing::TempDir dir("bench_torch");
  std::ofstream(dir / "run.yaml")
      << "model: {n_layer: 1, n_head: 2, d_model: 64, seq_len: 64, vocab_size: 200}\n"
      << "train: {steps: 1000, global_batch: 8, micro_batch: 4}\n";
  const auto config =
      testing::run_command(bench + " --config " + (dir / "run.yaml") + " --seq-len 16");
  ASSERT_EQ(config.status, 0) << config.output;
  EXPECT_NE(config.output.find("\"micro_batch\": 4, \"seq_len\": 16,"), std::string::npos)
      << config.output;

  // The Llama family's pieces from --config's model.* keys: the line names them under "arch",
  // and the explicit-mask and SDPA attentions (grouped-query, after RoPE) train to the same loss.
  std::ofstream(dir / "llama.yaml")
      << "model: {n_layer: 1, n_head: 4, d_model: 64, seq_len: 32, vocab_size: 200, norm: rmsnorm,"
      << " mlp: swiglu, position: rope, kv_heads: 2, bias: false, tie_embeddings: false}\n";
  const std::string llama_bench = bench + " --config " + (dir / "llama.yaml");
  const auto llama = testing::run_command(llama_bench);
  ASSERT_EQ(llama.status, 0) << llama.output;
  EXPECT_NE(last_line(llama.output)
                .find("\"arch\": {\"norm\": \"rmsnorm\", \"mlp\": \"swiglu\", \"position\": "
                      "\"rope\", \"kv_heads\": 2, \"bias\": false, \"tie_embeddings\": false}"),
            std::string::npos)
      << llama.output;
  EXPECT_GT(final_loss(last_line(llama.output)), 4.0) << llama.output;
  const auto llama_sdpa = testing::run_command(llama_bench + " --sdpa");
  ASSERT_EQ(llama_sdpa.status, 0) << llama_sdpa.output;
  EXPECT_NEAR(final_loss(last_line(llama_sdpa.output)), final_loss(last_line(llama.output)), 2e-3)
      << llama_sdpa.output;
  std::ofstream(dir / "bad.yaml") << "model: {n_head: 4, kv_heads: 3, norm: batchnorm}\n";
  const auto bad = testing::run_command(bench + " --config " + (dir / "bad.yaml"));
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(last_line(bad.output)
                .rfind("error: --config " + (dir / "bad.yaml") +
                           ": model.norm is 'batchnorm', not one of",
                       0),
            0u)
      << bad.output;

  for (const char* misuse : {" --micro-batch auto", " --modes eager,jit"}) {
    const auto refused = testing::run_command(bench + tiny + misuse);
    EXPECT_NE(refused.status, 0) << misuse;
    EXPECT_EQ(last_line(refused.output).rfind("error: ", 0), 0u) << refused.output;
  }
}

}  // namespace
}  // namespace strata
