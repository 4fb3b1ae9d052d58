// The config keys as the tables of docs/ARCHITECTURE.md §3 write them, generated from the code:
// every key that visit_fields (plan/config_fields.h) visits, with its type (an enumerated key: the
// words of its Choices table, in the table's order) and its default as the effective config writes
// it (Config{}). tests/unit/plan_config_reference_test.cpp compares §3's tables with these rows,
// and `plan --config-reference` prints them, so a key added, renamed or re-defaulted in the code
// fails that test until the docs follow. The Meaning column is prose: no row here has one.
#pragma once

#include <string>
#include <vector>

namespace strata {

// One key's cells, as Markdown (a pipe inside a cell is written `\|`).
struct ConfigReferenceRow {
  // The table the key is in: its first path component ("model" for model.moe.experts), or "" for
  // a key without one (recompute), in the table of top-level keys.
  std::string section;
  std::string key;  // the path below the section: moe.experts
  // int, float, bool, string, list of int; an enumerated key its words (`cosine` \| `linear` \|
  // `constant`); a key that also takes a word, the word and the type (`auto` \| int).
  std::string type;
  // The value as YAML text in backticks (`0.001`, `""`, `[]`, `auto`), or (required) for the one
  // key whose empty value validation refuses (data.train).
  std::string default_value;

  // The key's full path: model.moe.experts, recompute.
  std::string path() const { return section.empty() ? key : section + "." + key; }

  bool operator==(const ConfigReferenceRow&) const = default;
};

// Every key, in visit_fields' order: sections contiguous, in the order §3's tables follow.
std::vector<ConfigReferenceRow> config_reference_rows();

// The heading of a section's table: "### `model`", or "### Top-level keys" for "".
std::string config_section_heading(const std::string& section);
// The header line every key table starts with, and the line below it.
inline constexpr const char* kConfigTableHeader = "| Key | Type | Default | Meaning |";
inline constexpr const char* kConfigTableRule = "|---|---|---|---|";
// "| `moe.experts` | int | `0` | <meaning> |"
std::string config_table_row(const ConfigReferenceRow& row, const std::string& meaning);
// Every section's heading, header, rule and rows, each Meaning "…": what `plan
// --config-reference` prints, to paste into §3 (keeping the Meaning cells there).
std::string config_reference_tables();

}  // namespace strata
