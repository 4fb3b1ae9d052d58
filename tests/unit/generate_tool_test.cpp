// The `generate` tool end to end on a checkpoint whose greedy continuation is known: the prompt
// and the continuation come out as one text (the space between them kept, past window slides),
// ending with one newline, on stdout, and one tokens/s line on stderr with the threads it ran on:
// one for a model this small (tools/tool_threads.h), unless OMP_NUM_THREADS or --threads say
// otherwise.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;

// seq_len 8: twelve generated tokens slide the window twice. 320 pieces: the small tokenizer's
// smallest vocabulary with "▁beta" as one piece (300 spells it ▁, b, eta).
const GptShape kShape{2, 2, 16, 8, 320};

struct ToolRun {
  int status = -1;
  std::string out, err;
};

ToolRun run_generate(const std::string& args, const TempDir& dir,
                     const std::string& environment = "OMP_NUM_THREADS=1") {
  const std::string out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string command =
      "env " + environment + " " + testing::bin("generate") + " " + args + " >" + out + " 2>" + err;
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, testing::read_file(out), testing::read_file(err)};
}

TEST(GenerateTool, PrintsThePromptAndTheContinuationAsOneText) {
  TempDir dir("generate_tool");
  const Tokenizer tokenizer = testing::small_tokenizer(kShape.vocab_size);
  const std::vector<int> beta = tokenizer.encode("beta");
  ASSERT_EQ(beta.size(), 1u) << "'▁beta' is one piece of the small tokenizer";
  const std::string checkpoint = testing::write_strata_checkpoint(
      dir / "ckpt", kShape, testing::always_predicting(kShape, beta[0]), tokenizer.serialized());

  const ToolRun run =
      run_generate("--checkpoint " + checkpoint + " --prompt The --tokens 12 --temperature 0", dir);
  ASSERT_EQ(run.status, 0) << run.err;
  std::string expected = "The";
  for (int i = 0; i < 12; ++i) expected += " beta";
  // Decoded apart, the continuation lost its leading space: "Thebeta beta ...".
  EXPECT_EQ(run.out, expected + "\n");
  EXPECT_EQ(run.err.rfind("generated 12 tokens in ", 0), 0u) << run.err;
  EXPECT_NE(run.err.find(" tokens/s\n"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "one line: " << run.err;
  EXPECT_NE(run.err.find(" on 1 thread: "), std::string::npos) << run.err;
}

TEST(GenerateTool, TextEndingWithANewlineGetsNoSecond) {
  TempDir dir("generate_newline");
  const Tokenizer tokenizer = testing::small_tokenizer(kShape.vocab_size);
  int newline = -1;  // the byte piece <0x0A>
  for (int id = 0; id < tokenizer.vocab_size() && newline < 0; ++id)
    if (tokenizer.decode({id}) == "\n") newline = id;
  ASSERT_GE(newline, 0);
  const std::string checkpoint = testing::write_strata_checkpoint(
      dir / "ckpt", kShape, testing::always_predicting(kShape, newline), tokenizer.serialized());
  const ToolRun run =
      run_generate("--checkpoint " + checkpoint + " --prompt The --tokens 3 --temperature 0", dir);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "The\n\n\n");
}

// The default is one thread for this model's token (about 50 kFLOP) whatever the cores;
// OMP_NUM_THREADS and --threads (first) override it.
TEST(GenerateTool, RunsOnTheThreadsItsModelWarrants) {
  TempDir dir("generate_threads");
  const Tokenizer tokenizer = testing::small_tokenizer(kShape.vocab_size);
  const std::string checkpoint = testing::write_strata_checkpoint(
      dir / "ckpt", kShape, testing::always_predicting(kShape, 5), tokenizer.serialized());
  const std::string args = "--checkpoint " + checkpoint + " --prompt The --tokens 2";
  struct Case {
    std::string environment, flags, threads;
  };
  for (const Case& c : {Case{"-u OMP_NUM_THREADS", "", " on 1 thread: "},
                        Case{"OMP_NUM_THREADS=2", "", " on 2 threads: "},
                        Case{"OMP_NUM_THREADS=2", " --threads 1", " on 1 thread: "},
                        Case{"-u OMP_NUM_THREADS", " --threads 3", " on 3 threads: "}}) {
    SCOPED_TRACE(c.environment + c.flags);
    const ToolRun run = run_generate(args + c.flags, dir, c.environment);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_NE(run.err.find(c.threads), std::string::npos) << run.err;
  }
  const ToolRun zero = run_generate(args + " --threads 0", dir);
  EXPECT_NE(zero.status, 0);
  EXPECT_EQ(zero.err, "error: --threads must be at least 1, got 0\n");
}

}  // namespace
}  // namespace strata
