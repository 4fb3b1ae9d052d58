// The README's main job (scripts/demo.sh) builds exactly the tools it runs: every `build/bin/X`
// that it and scripts/prepare_fortunes.sh call, and nothing else (no test, no benchmark), so a
// fresh clone trains minutes sooner.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tests/unit/test_support.h"

namespace strata {
namespace {

std::string source_file(const std::string& path) {
  return testing::read_file(std::string(STRATA_SOURCE_DIR) + "/" + path);
}

// The tools a script runs: the X of every build/bin/X, also as "${STRATA_BIN_DIR:-build/bin}/X".
std::set<std::string> tools_run_by(const std::string& text) {
  std::set<std::string> tools;
  const std::regex run(R"(build/bin\}?/([a-z_]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), run); it != std::sregex_iterator();
       ++it)
    tools.insert((*it)[1]);
  return tools;
}

TEST(DemoScript, BuildsExactlyTheToolsItRuns) {
  const std::string demo = source_file("scripts/demo.sh");
  std::smatch targets;
  ASSERT_TRUE(std::regex_search(demo, targets, std::regex(R"re(STRATA_TARGETS="([^"]*)")re")))
      << "scripts/demo.sh builds every target";
  std::set<std::string> built;
  std::istringstream words(targets[1].str());
  for (std::string word; words >> word;) built.insert(word);
  std::set<std::string> run = tools_run_by(demo);
  for (const std::string& tool : tools_run_by(source_file("scripts/prepare_fortunes.sh")))
    run.insert(tool);
  EXPECT_EQ(built, run);
}

}  // namespace
}  // namespace strata
