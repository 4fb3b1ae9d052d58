// Minimal `--flag value` parsing shared by the tools: every flag is declared, unknown flags and
// missing values are errors that name the flag. A flag declared repeatable (`--set k=v`) collects
// every value in order; any other flag keeps its last value.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/core/error.h"

namespace strata {

// `--help` or `-h` anywhere on the command line: the usage on stdout and exit status 0, before
// anything else is parsed (so `ckpt inspect --help` answers too).
inline void exit_with_usage_on_help(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("%s\n", usage);
      std::exit(0);
    }
}

class ToolArgs {
 public:
  // `flags`: accepted flags, each taking one value; `repeatable`: those of them that may repeat.
  ToolArgs(int argc, char** argv, int first, const std::set<std::string>& flags, const char* usage,
           const std::set<std::string>& repeatable = {}) {
    exit_with_usage_on_help(argc, argv, usage);
    for (int i = first; i < argc; ++i) {
      const std::string arg = argv[i];
      if (!flags.count(arg)) fail("unknown argument '", arg, "' (", usage, ")");
      if (i + 1 >= argc) fail(arg, " needs a value (", usage, ")");
      values_[arg] = argv[++i];
      if (repeatable.count(arg)) lists_[arg].push_back(values_[arg]);
    }
  }
  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  // Every value of a repeatable flag, in command-line order (empty when absent).
  std::vector<std::string> all(const std::string& flag) const {
    const auto it = lists_.find(flag);
    return it == lists_.end() ? std::vector<std::string>{} : it->second;
  }
  std::string get(const std::string& flag, const std::string& fallback = "") const {
    const auto it = values_.find(flag);
    return it == values_.end() ? fallback : it->second;
  }
  std::string required(const std::string& flag, const char* usage) const {
    if (!has(flag)) fail("missing ", flag, " (", usage, ")");
    return get(flag);
  }
  long long integer(const std::string& flag, long long fallback) const {
    if (!has(flag)) return fallback;
    try {
      std::size_t used = 0;
      const long long value = std::stoll(get(flag), &used);
      if (used == get(flag).size()) return value;
    } catch (const std::exception&) {
    }
    fail(flag, " must be an integer, got '", get(flag), "'");
  }
  double number(const std::string& flag, double fallback) const {
    if (!has(flag)) return fallback;
    try {
      std::size_t used = 0;
      const double value = std::stod(get(flag), &used);
      if (used == get(flag).size()) return value;
    } catch (const std::exception&) {
    }
    fail(flag, " must be a number, got '", get(flag), "'");
  }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
};

}  // namespace strata
