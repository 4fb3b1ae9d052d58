// The rows of docs/ARCHITECTURE.md §3 generated from visit_fields (plan/config_reference.h): an
// enumerated key's type is its words, a default is the effective config's text and reads back as
// the default, and `plan --config-reference` prints them.
#include "plan/config_reference.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "plan/config.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

TEST(ConfigReference, RowsHoldTheWordsOfEnumeratedKeysAndTheEffectiveDefaults) {
  std::map<std::string, ConfigReferenceRow> rows;  // by section/key
  for (const ConfigReferenceRow& row : config_reference_rows())
    rows[row.section + "/" + row.key] = row;
  const auto expect_row = [&](const std::string& at, const std::string& type,
                              const std::string& default_value) {
    EXPECT_EQ(rows.at(at).type, type) << at;
    EXPECT_EQ(rows.at(at).default_value, default_value) << at;
  };
  expect_row("optimizer/schedule", "`cosine` \\| `linear` \\| `constant`", "`cosine`");
  expect_row("model/moe.capacity_factor", "float", "`1.25`");
  expect_row("optimizer/lr", "float", "`0.001`");  // as config.yaml writes it
  expect_row("parallel/dp", "`auto` \\| int", "`auto`");
  expect_row("parallel/pp_layers", "list of int", "`[]`");
  expect_row("checkpoint/dir", "string", "`\"\"`");
  expect_row("precision/loss_scale", "`dynamic` \\| float", "`dynamic`");
  expect_row("data/train", "string \\| list of sources", "(required)");
  expect_row("/device", "`cpu` \\| `cuda` \\| `auto`", "`auto`");
}

// The rows' defaults are the defaults: every one given back as a --set reads as Config{}.
TEST(ConfigReference, DefaultsReadBackAsTheDefaultConfig) {
  std::vector<std::string> overrides;
  for (const ConfigReferenceRow& row : config_reference_rows()) {
    if (row.default_value == "(required)") continue;
    overrides.push_back(row.path() + "=" +
                        row.default_value.substr(1, row.default_value.size() - 2));
  }
  Config expected;
  expected.data.train = "shards";
  EXPECT_EQ(parse_config("data: {train: shards}\n", "config.yaml", overrides), expected);
}

TEST(ConfigReference, PlanPrintsTheRows) {
  const auto result = testing::run_command(testing::bin("plan") + " --config-reference");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(result.output, config_reference_tables());
}

}  // namespace
}  // namespace strata
