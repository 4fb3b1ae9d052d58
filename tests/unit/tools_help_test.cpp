// Every tool answers `--help` (and `-h`) with its usage on stdout and exit status 0: once only
// train, tokenize and plot did, and the others called it an unknown argument.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

TEST(ToolsHelp, EveryToolPrintsItsUsageAndSucceeds) {
  for (const std::string tool : {"train", "tokenize", "eval", "generate", "ckpt", "bench", "plan"})
    for (const std::string flag : {"--help", "-h"}) {
      SCOPED_TRACE(tool + " " + flag);
      const auto result = testing::run_command(testing::bin(tool) + " " + flag);
      EXPECT_EQ(result.status, 0) << result.output;
      EXPECT_NE(result.output.find("usage: " + tool + " "), std::string::npos) << result.output;
      EXPECT_EQ(result.output.find("error"), std::string::npos) << result.output;
    }
  // After a subcommand too: the usage, not an error about the rest of the line.
  for (const std::string command : {"ckpt inspect --help", "bench train --help"}) {
    const auto result = testing::run_command(testing::bin(command));
    EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
    EXPECT_NE(result.output.find("usage: "), std::string::npos) << result.output;
  }
}

}  // namespace
}  // namespace strata
