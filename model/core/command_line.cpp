// CommandSpec's help text and ToolArgs' parsing (model/core/command_line.h).
#include "model/core/command_line.h"

#include <algorithm>
#include <iostream>
#include <sstream>

namespace strata {
namespace {

constexpr std::size_t kWidth = 100;  // the columns help lines are wrapped to

// `text` wrapped to kWidth, every line after the first indented by `indent` columns; the first
// line starts at column `start`.
std::string wrapped(const std::string& text, std::size_t indent, std::size_t start) {
  std::istringstream words(text);
  std::string out, word;
  std::size_t column = start;
  bool first = true;
  while (words >> word) {
    if (!first && column + 1 + word.size() > kWidth) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  return out;
}

std::string flag_label(const FlagSpec& flag) {
  return flag.value.empty() ? flag.name : flag.name + " " + flag.value;
}

// Text that is a paragraph of its own: wrapped, blank lines between paragraphs kept.
std::string paragraphs(const std::string& text) {
  std::string out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find("\n\n", begin), text.size());
    const std::string paragraph = text.substr(begin, end - begin);
    // A paragraph whose lines start with spaces is laid out by hand (examples, tables).
    out += paragraph.starts_with(" ") ? paragraph : wrapped(paragraph, 0, 0);
    out += "\n";
    if (end == text.size()) break;
    out += "\n";
    begin = end + 2;
  }
  return out;
}

}  // namespace

std::string help_text(const CommandSpec& command) {
  std::string out = command.usage + "\n";
  if (!command.summary.empty()) out += "\n" + paragraphs(command.summary);
  std::size_t label_width = 0;
  for (const FlagSpec& flag : command.flags)
    label_width = std::max(label_width, flag_label(flag).size());
  label_width = std::min<std::size_t>(label_width, 28);
  if (!command.flags.empty()) out += "\n";
  for (const FlagSpec& flag : command.flags) {
    std::string line = "  " + flag_label(flag);
    const std::size_t indent = 2 + label_width + 2;
    line += line.size() < indent ? std::string(indent - line.size(), ' ') : "  ";
    std::string help = flag.help;
    if (flag.required) {
      help += " (required)";
    } else if (!flag.default_text.empty()) {
      help += " (default: " + flag.default_text + ")";
    } else if (!flag.default_value.empty()) {
      help += " (default: " + flag.default_value + ")";
    }
    if (flag.repeatable) help += " (repeatable)";
    out += line + wrapped(help, indent, line.size()) + "\n";
  }
  if (!command.notes.empty()) out += "\n" + paragraphs(command.notes);
  return out;
}

void exit_with_help(int argc, char** argv, const CommandSpec& command) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << help_text(command) << std::flush;
      std::exit(0);
    }
}

ToolArgs::ToolArgs(int argc, char** argv, int first, const CommandSpec& command)
    : command_(command) {
  exit_with_help(argc, argv, command_);
  const std::string& usage = command_.usage;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (const auto equals = arg.find('='); arg.starts_with("--") && equals != std::string::npos) {
      value = arg.substr(equals + 1);
      arg.resize(equals);
      inline_value = true;
    }
    const auto declared = std::ranges::find(command_.flags, arg, &FlagSpec::name);
    const int room = command_.max_positionals;
    if (declared == command_.flags.end() && !arg.starts_with("-") &&
        (room < 0 || static_cast<int>(positionals_.size()) < room)) {
      positionals_.push_back(argv[i]);
      continue;
    }
    if (declared == command_.flags.end())
      fail(arg.starts_with("-") ? "unknown option '" : "unexpected argument '", arg, "' (", usage,
           ")");
    if (declared->value.empty()) {
      if (inline_value) fail(arg, " takes no value");
      values_[arg] = "true";
      continue;
    }
    if (!inline_value) {
      // A value never starts with "--": `--out --force` is a missing value, not a file "--force".
      if (i + 1 >= argc || std::string(argv[i + 1]).starts_with("--"))
        fail(arg, " needs a value: ", declared->value, " (", usage, ")");
      value = argv[++i];
    }
    values_[arg] = value;
    if (declared->repeatable) lists_[arg].push_back(value);
  }
  if (static_cast<int>(positionals_.size()) < command_.min_positionals)
    fail("expected ", command_.min_positionals == command_.max_positionals ? "" : "at least ",
         command_.min_positionals, " argument", command_.min_positionals == 1 ? "" : "s", ", got ",
         positionals_.size(), " (", usage, ")");
  for (const FlagSpec& flag : command_.flags)
    if (flag.required && !has(flag.name)) fail("missing ", flag.name, " (", usage, ")");
}

const FlagSpec& ToolArgs::spec(const std::string& flag) const {
  const auto declared = std::ranges::find(command_.flags, flag, &FlagSpec::name);
  STRATA_CHECK(declared != command_.flags.end(), "flag ", flag, " is not declared");
  return *declared;
}

std::vector<std::string> ToolArgs::all(const std::string& flag) const {
  const auto it = lists_.find(flag);
  return it == lists_.end() ? std::vector<std::string>{} : it->second;
}

std::string ToolArgs::get(const std::string& flag) const {
  const auto it = values_.find(flag);
  return it == values_.end() ? spec(flag).default_value : it->second;
}

long long ToolArgs::integer(const std::string& flag) const {
  const std::string text = get(flag);
  STRATA_CHECK(!text.empty() || has(flag), "flag ", flag, " has no default");
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  fail(flag, " must be an integer, got '", text, "'");
}

double ToolArgs::number(const std::string& flag) const {
  const std::string text = get(flag);
  STRATA_CHECK(!text.empty() || has(flag), "flag ", flag, " has no default");
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  fail(flag, " must be a number, got '", text, "'");
}

}  // namespace strata
