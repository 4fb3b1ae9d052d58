// The command lines of the executables: each command declares its flags once, in a CommandSpec
// (name, value, default, one line of help), and that one table both parses the command line and
// prints
// `--help`, so the help cannot name a flag the parser refuses or a default the tool does not use.
// Unknown flags and missing values are errors that name the flag and quote the usage line. A flag
// declared repeatable (`--set k=v`) collects every value in order; any other keeps its last.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/core/error.h"

namespace strata {

struct FlagSpec {
  FlagSpec(std::string name, std::string value, std::string default_value, std::string help,
           std::string default_text = "", bool required = false, bool repeatable = false)
      : name(std::move(name)),
        value(std::move(value)),
        default_value(std::move(default_value)),
        help(std::move(help)),
        default_text(std::move(default_text)),
        required(required),
        repeatable(repeatable) {}

  std::string name;           // "--tokens"
  std::string value;          // what it takes ("N", "FILE"); empty: a switch that takes none
  std::string default_value;  // used when the flag is absent; empty: none
  std::string help;           // one line
  // Shown instead of default_value when the default is worked out at run time ("the run's
  // train.eval_tokens"); the command then asks has() and computes it.
  std::string default_text;
  bool required = false;
  bool repeatable = false;
};

struct CommandSpec {
  CommandSpec(std::string usage, std::string summary, std::vector<FlagSpec> flags,
              std::string notes = "", int min_positionals = 0, int max_positionals = 0)
      : usage(std::move(usage)),
        summary(std::move(summary)),
        flags(std::move(flags)),
        notes(std::move(notes)),
        min_positionals(min_positionals),
        max_positionals(max_positionals) {}

  std::string usage;    // "usage: eval --checkpoint CKPT ...": one line, quoted by errors
  std::string summary;  // what the command does, a few sentences
  std::vector<FlagSpec> flags;
  std::string notes;  // after the flags: formats, references, examples
  // Arguments that are not flags (`ckpt diff A B`), anywhere among the flags: how many, at least
  // and at most (-1: no limit).
  int min_positionals = 0;
  int max_positionals = 0;
};

// Usage, summary, one aligned line a flag with its default, and notes.
std::string help_text(const CommandSpec& command);

// `--help` or `-h` anywhere on the command line: the help on stdout and exit status 0, before
// anything else is parsed.
void exit_with_help(int argc, char** argv, const CommandSpec& command);

class ToolArgs {
 public:
  // Parses argv[first..]: `--flag value`, `--flag=value`, or `--flag` alone for a switch.
  ToolArgs(int argc, char** argv, int first, const CommandSpec& command);

  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The arguments that are not flags, in order.
  const std::vector<std::string>& positionals() const { return positionals_; }
  // Every value of a repeatable flag, in command-line order (empty when absent).
  std::vector<std::string> all(const std::string& flag) const;
  // The value given, else the declared default ("" when there is none).
  std::string get(const std::string& flag) const;
  long long integer(const std::string& flag) const;
  double number(const std::string& flag) const;

 private:
  const FlagSpec& spec(const std::string& flag) const;

  CommandSpec command_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::vector<std::string> positionals_;
};

}  // namespace strata
