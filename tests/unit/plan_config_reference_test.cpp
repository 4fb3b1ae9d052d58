// docs/ARCHITECTURE.md §3 against the code: every key table's rows (key, type, default) equal the
// rows generated from visit_fields (plan/config_reference.h), so a key added, renamed or
// re-defaulted in the code fails here until the docs follow. Each mismatch is one failure showing
// the documented row and the expected one (with the documented Meaning) to paste in its place;
// `plan --config-reference` prints every expected row. The Meaning cells are not compared.
#include "plan/config_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "plan/config.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

const char* const kDocument = "docs/ARCHITECTURE.md";
const char* const kPrintCommand = "`plan --config-reference`";

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(' ') + 1 - begin);
}

// A table line's cells, split at the pipes that are not escaped (`\|` stays inside its cell).
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {  // after the leading pipe
    if (line[i] == '|' && line[i - 1] != '\\') {
      cells.push_back(trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// A row of one of §3's key tables.
struct DocumentedRow {
  std::string where;    // docs/ARCHITECTURE.md:<line>
  std::string heading;  // of its table
  std::string section;  // the heading's section
  std::string text;
  std::vector<std::string> cells;
};

// The rows of §3's key tables (`markdown` is the whole document), and in `problems` a message for
// each table whose header or heading is not a key table's; their rows are left out.
std::vector<DocumentedRow> key_table_rows(const std::string& markdown,
                                          const std::vector<ConfigReferenceRow>& expected,
                                          std::vector<std::string>& problems) {
  std::map<std::string, std::string> sections;  // heading -> section
  for (const ConfigReferenceRow& row : expected)
    sections[config_section_heading(row.section)] = row.section;
  std::vector<DocumentedRow> rows;
  std::istringstream lines(markdown);
  bool in_section_three = false, in_table = false;
  std::string heading;
  std::optional<std::string> section;  // of the table being read; none: its rows are no keys
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string where = std::string(kDocument) + ":" + std::to_string(++number);
    if (line.starts_with("## ")) in_section_three = line == "## 3. Configuration";
    if (!in_section_three) continue;
    if (line.starts_with("### ")) heading = line;
    if (!line.starts_with('|')) {
      in_table = false;
      continue;
    }
    if (in_table) {
      if (section) rows.push_back({where, heading, *section, line, cells_of(line)});
      continue;
    }
    in_table = true;  // the header, then the rule
    const auto it = sections.find(heading);
    section = it == sections.end() ? std::nullopt : std::optional(it->second);
    if (line != kConfigTableHeader) {
      problems.push_back(where + ": a table whose header is not '" + kConfigTableHeader + "':\n  " +
                         line);
      section = std::nullopt;
    } else if (!section) {
      problems.push_back(
          where + ": a key table under '" + heading + "', which names no section of the config (" +
          config_section_heading("<section>") + " or " + config_section_heading("") + ")");
    }
    std::getline(lines, line);
    ++number;
  }
  return rows;
}

// §3's key tables held against the generated rows: one message per documented row that differs,
// is no key or is given twice, and per key that no row documents.
std::vector<std::string> reference_problems(const std::string& markdown,
                                            const std::vector<ConfigReferenceRow>& expected) {
  std::map<std::string, const ConfigReferenceRow*> by_path;  // full key path -> its row
  for (const ConfigReferenceRow& row : expected) by_path[row.path()] = &row;
  std::vector<std::string> problems;
  std::set<std::string> documented;
  for (const DocumentedRow& doc : key_table_rows(markdown, expected, problems)) {
    const std::string key = doc.cells.empty() ? "" : doc.cells[0];
    if (doc.cells.size() != 4 || key.size() < 3 || key.front() != '`' || key.back() != '`' ||
        std::count(key.begin(), key.end(), '`') != 2) {
      problems.push_back(doc.where + ": not a row | `key` | type | default | meaning |\n" +
                         "  documented: " + doc.text);
      continue;
    }
    const std::string name = key.substr(1, key.size() - 2);
    const std::string path = doc.section.empty() ? name : doc.section + "." + name;
    const auto it = by_path.find(path);
    if (it == by_path.end()) {
      problems.push_back(doc.where + ": " + key + " under '" + doc.heading +
                         "' is no key of the code (visit_fields, plan/config_fields.h): rename "
                         "or remove the row\n  documented: " +
                         doc.text);
    } else if (!documented.insert(path).second) {
      problems.push_back(doc.where + ": '" + path +
                         "' is documented twice\n  documented: " + doc.text);
    } else if (doc.cells[1] != it->second->type || doc.cells[2] != it->second->default_value) {
      problems.push_back(doc.where + ": '" + path + "' differs from the code (type or default)\n" +
                         "  documented: " + doc.text +
                         "\n  expected:   " + config_table_row(*it->second, doc.cells[3]));
    }
  }
  for (const auto& [path, row] : by_path) {
    if (documented.contains(path)) continue;
    problems.push_back(std::string(kDocument) + " §3: '" + path +
                       "' is not documented; add under '" + config_section_heading(row->section) +
                       "':\n  " + config_table_row(*row, "<meaning>"));
  }
  return problems;
}

// A stand-in for the document: §3 holding exactly the generated tables.
std::string generated_document() {
  return "## 2. Before\n\n| a | b |\n|---|---|\n\n## 3. Configuration\n\nProse.\n\n" +
         config_reference_tables() + "\n### An example\n\n## 4. After\n\n| x |\n|---|\n";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(ConfigReference, ArchitectureTablesMatchTheCode) {
  const std::string markdown =
      testing::read_file(testing::source_dir() + "/" + std::string(kDocument));
  ASSERT_NE(markdown.find("## 3. Configuration"), std::string::npos) << "no §3 in " << kDocument;
  const auto problems = reference_problems(markdown, config_reference_rows());
  for (const std::string& problem : problems) ADD_FAILURE() << problem;
  if (!problems.empty())
    ADD_FAILURE() << "the code's rows, in order: " << kPrintCommand << " (build/bin/plan)";
}

TEST(ConfigReference, GeneratedTablesPassTheCheck) {
  EXPECT_EQ(reference_problems(generated_document(), config_reference_rows()),
            std::vector<std::string>{});
}

TEST(ConfigReference, EachMismatchIsOneMessageWithTheRowToPaste) {
  std::string markdown = generated_document();
  markdown =
      replaced(markdown, "| `steps` | int | `2000` | … |", "| `steps` | int | `1000` | runs |");
  markdown = replaced(markdown, "| `keep` | int | `3` | … |\n", "");
  markdown = replaced(markdown, "| `seed` |", "| `sed` |");
  markdown =
      replaced(markdown, "| `recompute` |", "| `threads` | int | `0` | x |\n| `recompute` |");
  markdown = replaced(markdown, "| `enabled` |", "| enabled |");
  const auto problems = reference_problems(markdown, config_reference_rows());
  ASSERT_EQ(problems.size(), 8u) << ::testing::PrintToString(problems);
  // In the document's order, then the keys it misses in path order.
  EXPECT_NE(problems[0].find("`sed` under '### `run`' is no key of the code"), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("'train.steps' differs from the code (type or default)\n"
                             "  documented: | `steps` | int | `1000` | runs |\n"
                             "  expected:   | `steps` | int | `2000` | runs |"),
            std::string::npos)
      << problems[1];
  EXPECT_NE(problems[2].find("'threads' differs"), std::string::npos) << problems[2];
  EXPECT_NE(problems[3].find("'threads' is documented twice"), std::string::npos) << problems[3];
  EXPECT_NE(problems[4].find("not a row | `key` |"), std::string::npos) << problems[4];
  EXPECT_NE(problems[5].find("'checkpoint.keep' is not documented; add under '### `checkpoint`':\n"
                             "  | `keep` | int | `3` | <meaning> |"),
            std::string::npos)
      << problems[5];
  EXPECT_NE(problems[6].find("'diloco.enabled' is not documented"), std::string::npos)
      << problems[6];
  EXPECT_NE(problems[7].find("'run.seed' is not documented"), std::string::npos) << problems[7];
}

TEST(ConfigReference, KeyTablesOnlyUnderASectionsHeading) {
  const std::string markdown =
      replaced(generated_document(), "### `checkpoint`", "### `checkpoints`");
  const auto problems = reference_problems(markdown, config_reference_rows());
  ASSERT_EQ(problems.size(), 4u) << ::testing::PrintToString(problems);  // 3 keys missing
  EXPECT_NE(problems[0].find("a key table under '### `checkpoints`', which names no section"),
            std::string::npos)
      << problems[0];
}

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
