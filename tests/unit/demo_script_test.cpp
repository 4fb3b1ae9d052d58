// The README's main job (scripts/demo.sh) builds exactly the tools it runs: every `build/bin/X`
// that it and scripts/prepare_fortunes.sh call, and nothing else (no test, no benchmark), so a
// fresh clone trains minutes sooner.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

std::string source_file(const std::string& path) {
  return testing::read_file(testing::source_dir() + "/" + path);
}

// The tools a script runs: the X of every build/bin/X, also as "${STRATA_BIN_DIR:-build/bin}/X".
// (Plain string search: std::regex trips GCC 12's -Wmaybe-uninitialized in sanitizer builds.)
std::set<std::string> tools_run_by(const std::string& text) {
  std::set<std::string> tools;
  for (std::size_t at = text.find("build/bin"); at != std::string::npos;
       at = text.find("build/bin", at + 1)) {
    std::size_t begin = at + std::string("build/bin").size();
    if (begin < text.size() && text[begin] == '}') ++begin;
    if (begin >= text.size() || text[begin] != '/') continue;
    const std::size_t end = text.find_first_not_of("abcdefghijklmnopqrstuvwxyz_", begin + 1);
    if (end > begin + 1) tools.insert(text.substr(begin + 1, end - begin - 1));
  }
  return tools;
}

TEST(DemoScript, BuildsExactlyTheToolsItRuns) {
  const std::string demo = source_file("scripts/demo.sh");
  const std::string key = "STRATA_TARGETS=\"";
  const std::size_t at = demo.find(key);
  ASSERT_NE(at, std::string::npos) << "scripts/demo.sh builds every target";
  const std::size_t begin = at + key.size();
  std::set<std::string> built;
  std::istringstream words(demo.substr(begin, demo.find('"', begin) - begin));
  for (std::string word; words >> word;) built.insert(word);
  std::set<std::string> run = tools_run_by(demo);
  for (const std::string& tool : tools_run_by(source_file("scripts/prepare_fortunes.sh")))
    run.insert(tool);
  EXPECT_EQ(built, run);
}

}  // namespace
}  // namespace strata
