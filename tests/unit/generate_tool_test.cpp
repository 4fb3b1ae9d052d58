// The `generate` tool end to end on a checkpoint whose greedy continuation is known: the prompt
// and the continuation come out as one text (the space between them kept, past window slides),
// on stdout, and one tokens/s line on stderr.
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

ToolRun run_generate(const std::string& args, const TempDir& dir) {
  const std::string out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string command =
      "OMP_NUM_THREADS=1 " + testing::bin("generate") + " " + args + " >" + out + " 2>" + err;
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
}

}  // namespace
}  // namespace strata
