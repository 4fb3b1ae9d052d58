// The command lines a new user meets first: every tool and every subcommand answers `--help` (and
// `-h`) with its own usage, each flag on a line with its default, on stdout and exit status 0;
// `train --print-config` shows the effective config and where each value came from, touching no
// run directory; a flag that swallowed the config says so.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "plan/config.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The help's entry of `flag`: its line (after the indent) and the lines that continue it, or "".
std::string flag_line(const std::string& help, const std::string& flag) {
  std::size_t at = help.find("\n  " + flag + " ");
  if (at == std::string::npos) return "";
  std::string entry;
  do {
    const std::size_t end = std::min(help.find('\n', at + 1), help.size());
    entry += help.substr(at + 1, end - at - 1);
    at = end;
  } while (at < help.size() && help.compare(at, 4, "\n   ") == 0);
  return entry;
}

TEST(ToolsHelp, EveryToolAndSubcommandPrintsItsOwnHelp) {
  for (const std::string tool : {"train", "tokenize", "eval", "generate", "ckpt", "bench", "plan"})
    for (const std::string flag : {"--help", "-h"}) {
      SCOPED_TRACE(tool + " " + flag);
      const auto result = testing::run_command(testing::bin(tool) + " " + flag);
      EXPECT_EQ(result.status, 0) << result.output;
      EXPECT_TRUE(contains(result.output, "usage: " + tool + " ")) << result.output;
      EXPECT_FALSE(contains(result.output, "error")) << result.output;
    }
  // A subcommand's help is its own, not the tool's: its usage first, its flags below.
  const std::vector<std::string> subcommands = {
      "ckpt inspect", "ckpt verify", "ckpt diff",       "ckpt export-hf",  "ckpt import-hf",
      "bench train",  "bench sgemm", "bench attention", "bench checkpoint"};
  for (const std::string& command : subcommands) {
    SCOPED_TRACE(command);
    const auto result = testing::run_command(testing::bin(command) + " --help");
    EXPECT_EQ(result.status, 0) << result.output;
    EXPECT_TRUE(result.output.starts_with("usage: " + command + " ")) << result.output;
  }
  EXPECT_TRUE(testing::run_command(testing::bin("bench calibrate --help"))
                  .output.starts_with("usage: mpirun -np N bench calibrate "));
}

TEST(ToolsHelp, FlagsComeWithOneLineAndTheirDefaults) {
  const std::string generate = testing::run_command(testing::bin("generate") + " --help").output;
  EXPECT_TRUE(contains(flag_line(generate, "--temperature"), "(default: 0.8)")) << generate;
  EXPECT_TRUE(contains(flag_line(generate, "--top-k"), "(default: 40)")) << generate;
  EXPECT_TRUE(contains(flag_line(generate, "--checkpoint"), "(required)")) << generate;
  const std::string eval = testing::run_command(testing::bin("eval") + " --help").output;
  EXPECT_TRUE(contains(flag_line(eval, "--tokens"), "train.eval_tokens")) << eval;
  const std::string tokenize = testing::run_command(testing::bin("tokenize") + " --help").output;
  EXPECT_TRUE(contains(flag_line(tokenize, "--val-fraction"), "(default: 0.05)")) << tokenize;
  EXPECT_FALSE(flag_line(tokenize, "--verify").empty()) << tokenize;
  const std::string sgemm = testing::run_command(testing::bin("bench sgemm") + " --help").output;
  EXPECT_TRUE(contains(flag_line(sgemm, "--repeats"), "(default: 20)")) << sgemm;
  const std::string import = testing::run_command(testing::bin("ckpt import-hf --help")).output;
  EXPECT_TRUE(contains(flag_line(import, "--tokenizer"), "DIR/tokenizer.model")) << import;
  // train's help points to the key reference and lists --print-config.
  const std::string train = testing::run_command(testing::bin("train") + " --help").output;
  EXPECT_TRUE(contains(train, "docs/ARCHITECTURE.md §3")) << train;
  EXPECT_FALSE(flag_line(train, "--print-config").empty()) << train;
  EXPECT_FALSE(flag_line(train, "--resume").empty()) << train;
}

TEST(ToolsHelp, AFlagThatSwallowedTheConfigSaysSo) {
  const auto result = testing::run_command(testing::bin("train") + " --resume x.yaml");
  EXPECT_NE(result.status, 0);
  EXPECT_EQ(result.output,
            "error: --resume took 'x.yaml' as its CHECKPOINT, but that names a config: give the "
            "configs first (train x.yaml --resume)\n");
}

class PrintConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_print_config_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write(dir_ / "base.yaml", "run: {name: printed, dir: " + (dir_ / "runs").string() +
                                  "}\n"
                                  "data: {train: shards/train}\n"
                                  "train: {steps: 50, micro_batch: 4}\n"
                                  "optimizer: {lr: 0.002}\n");
    write(dir_ / "more.yaml", "train: {micro_batch: 2}\noptimizer: {warmup_steps: 60}\n");
  }
  static void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PrintConfig, ShowsEachValueWithItsSourceAndTouchesNoRunDirectory) {
  const std::string base = (dir_ / "base.yaml").string(), more = (dir_ / "more.yaml").string();
  const auto result = testing::run_command(testing::bin("train") + " " + base + " " + more +
                                           " --set train.steps=40 --print-config");
  ASSERT_EQ(result.status, 0) << result.output;
  const std::string& out = result.output;
  EXPECT_TRUE(contains(out, "steps: 40  # --set 'train.steps=40'")) << out;
  EXPECT_TRUE(contains(out, "micro_batch: 2  # " + more)) << out;
  EXPECT_TRUE(contains(out, "lr: 0.002  # " + base)) << out;
  EXPECT_TRUE(contains(out, "global_batch: 64  # default")) << out;
  // A legal value that is surely not meant: one warning line.
  EXPECT_TRUE(contains(out,
                       "warning: optimizer.warmup_steps (60) >= train.steps (40): the learning "
                       "rate is still warming up when the run ends"))
      << out;
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "--print-config created the run directory";
  // What it prints is the config itself: read back, the same config.
  std::string yaml;
  for (std::size_t at = 0; at < out.size();) {
    const std::size_t end = std::min(out.find('\n', at), out.size());
    if (!out.substr(at, end - at).starts_with("warning:")) yaml += out.substr(at, end - at) + "\n";
    at = end + 1;
  }
  EXPECT_EQ(parse_config(yaml, "printed"), load_configs({base, more}, {"train.steps=40"}));
}

}  // namespace
}  // namespace strata
