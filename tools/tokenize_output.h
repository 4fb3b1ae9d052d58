// What tokenize's modes share (tools/tokenize.cpp, tools/tokenize_modes.h): the input list, the
// refusal to replace a corpus silently, and the staging folder that makes the output appear whole
// or not at all (docs/ARCHITECTURE.md §5 "Token shards").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace strata {

// The staging directory DIR/.tokenize-staging-<pid>/ with train/ and val/ inside: created on
// construction, removed on destruction unless committed.
class StagedOutput {
 public:
  explicit StagedOutput(const std::string& out);
  ~StagedOutput();
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  std::filesystem::path path(const std::string& name) const { return staging_ / name; }

  // Replaces DIR/<name> by the staged one for each of tokenizer.model, train and val; a staged
  // entry that is missing or an empty directory (val/ with --val-fraction 0, tokenizer.model of
  // converted ids) removes the old one, so no output of an earlier run is left mixed with this one.
  void commit();

 private:
  std::filesystem::path out_;
  std::filesystem::path staging_;
};

// Before any work: strata::Error when `out` already holds a corpus (any of the names above),
// unless `force` (--force) asks to replace it.
void check_output_is_free(const std::string& out, bool force);

// The input files: each of `inputs`, a directory replaced by its regular, non-hidden files in name
// order.
std::vector<std::string> list_input_files(const std::vector<std::string>& inputs);

inline const char* plural(std::size_t n, const char* one, const char* many) {
  return n == 1 ? one : many;
}

}  // namespace strata
