// The compile lines of this build name no folder of the clone in a definition, so that the
// compiler cache serves a clone in any folder (scripts/compiler_cache.sh: ccache rewrites the
// paths of sources and include folders inside the clone, but not a -D of an absolute path, which
// would make that object differ between every two clones). Read from the build's own
// compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "data/json_value.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

TEST(CompileLines, NoDefinitionNamesTheClonesFolders) {
  const std::string path = (testing::build_dir() / "compile_commands.json").string();
  const std::string text = testing::read_file(path);
  ASSERT_FALSE(text.empty()) << path << " is missing";
  const JsonValue commands = parse_json(text);
  ASSERT_GT(commands.items.size(), 100u);
  const std::string source = testing::source_dir(), build = testing::build_dir().string();
  std::size_t definitions = 0;
  for (const JsonValue& entry : commands.items) {
    const JsonValue* command = entry.find("command");
    ASSERT_NE(command, nullptr);
    std::istringstream words(command->text);
    for (std::string word; words >> word;) {
      if (!word.starts_with("-D")) continue;
      ++definitions;
      EXPECT_EQ(word.find(source), std::string::npos) << word << " in " << command->text;
      EXPECT_EQ(word.find(build), std::string::npos) << word << " in " << command->text;
    }
  }
  EXPECT_GT(definitions, 0u);  // the check saw definitions (NDEBUG at least)
}

}  // namespace
}  // namespace strata
