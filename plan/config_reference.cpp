// §3's rows from the one list of keys: the types from the fields' C++ types (and the Choices tables
// of the enumerated ones), the defaults from field_texts (config_diff.cpp), the text a resume
// compares and the effective config writes.
#include "plan/config_reference.h"

#include <string_view>
#include <type_traits>

#include "model/core/error.h"
#include "plan/config_fields.h"

namespace strata {
namespace {

// A word as a cell writes it: in backticks, so that it reads as something to type.
std::string code(std::string_view text) { return "`" + std::string(text) + "`"; }

}  // namespace

namespace config_detail {
namespace {

// Each key's type cell, and whether the key must be given.
class FieldType {
 public:
  struct Type {
    std::string path, type;
    bool required = false;
  };

  explicit FieldType(std::vector<Type>& out) : out_(out) {}

  template <class Int>
  requires std::is_integral_v<Int>
  void operator()(std::string_view path, const Int&) {
    add(path, std::is_same_v<Int, bool> ? "bool" : "int");
  }
  void operator()(std::string_view path, const double&) { add(path, "float"); }
  void operator()(std::string_view path, const std::string&) { add(path, "string"); }
  void operator()(std::string_view path, const std::vector<int>&) { add(path, "list of int"); }
  template <class E, std::size_t N>
  void operator()(std::string_view path, const Choice<E, N>& choice) {
    std::string words;
    for (const auto& entry : choice.choices.entries)
      words += (words.empty() ? "" : " \\| ") + code(entry.word);
    add(path, words);
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, const ChoiceList<E, N>& list) {
    std::string words;
    for (const auto& entry : list.choices.entries)
      words += (words.empty() ? "" : " \\| ") + code(entry.word);
    add(path, "list of " + words);
  }
  void operator()(std::string_view path, const AutoCount&) { add(path, code("auto") + " \\| int"); }
  void operator()(std::string_view path, const LossScale&) {
    add(path, code("dynamic") + " \\| float");
  }
  // Validation refuses a config without it (config_validate.cpp): it has no default to show.
  void operator()(std::string_view path, const TrainData&) {
    add(path, "string \\| list of sources", true);
  }

 private:
  void add(std::string_view path, std::string type, bool required = false) {
    out_.push_back({std::string(path), std::move(type), required});
  }
  std::vector<Type>& out_;
};

}  // namespace
}  // namespace config_detail

std::vector<ConfigReferenceRow> config_reference_rows() {
  using config_detail::FieldType;
  Config defaults;
  std::vector<FieldType::Type> types;
  config_detail::visit_fields(defaults, FieldType(types));
  const auto texts = config_detail::field_texts(defaults);

  std::vector<ConfigReferenceRow> rows;
  for (const auto& [path, type, required] : types) {
    const auto dot = path.find('.');
    ConfigReferenceRow row;
    if (dot != std::string::npos) {
      row.section = path.substr(0, dot);
      row.key = path.substr(dot + 1);
    } else {
      row.key = path;
    }
    row.type = type;
    const std::string& text = texts.at(path);
    // A backtick, pipe or line break would end the cell's code span or the cell itself.
    STRATA_CHECK(text.find_first_of("`|\n") == std::string::npos, "the default of '", path,
                 "' cannot be written in a table cell: ", text);
    // An empty string is what the effective config writes as "".
    row.default_value = required ? "(required)" : code(text.empty() ? "\"\"" : text);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string config_section_heading(const std::string& section) {
  return section.empty() ? "### Top-level keys" : "### " + code(section);
}

std::string config_table_row(const ConfigReferenceRow& row, const std::string& meaning) {
  return "| " + code(row.key) + " | " + row.type + " | " + row.default_value + " | " + meaning +
         " |";
}

std::string config_reference_tables() {
  std::string text;
  bool first = true;
  std::string section;
  for (const ConfigReferenceRow& row : config_reference_rows()) {
    if (first || row.section != section) {
      text += std::string(first ? "" : "\n") + config_section_heading(row.section) + "\n\n" +
              kConfigTableHeader + "\n" + kConfigTableRule + "\n";
      section = row.section;
      first = false;
    }
    text += config_table_row(row, "…") + "\n";
  }
  return text;
}

}  // namespace strata
