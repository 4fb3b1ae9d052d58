#include "tools/tokenize_output.h"

#include <unistd.h>

#include <algorithm>

#include "model/core/error.h"

namespace strata {

namespace fs = std::filesystem;

namespace {
constexpr const char* kOutputNames[] = {"tokenizer.model", "train", "val"};
}  // namespace

StagedOutput::StagedOutput(const std::string& out) : out_(out) {
  std::error_code ec;
  fs::create_directories(out_, ec);
  if (ec || !fs::is_directory(out_)) {
    fail("cannot create output directory '", out, "': ", ec ? ec.message() : "not a directory");
  }
  staging_ = out_ / (".tokenize-staging-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  fs::create_directories(staging_ / "train", ec);
  if (!ec) fs::create_directories(staging_ / "val", ec);
  if (ec) fail("cannot create '", staging_.string(), "': ", ec.message());
}

StagedOutput::~StagedOutput() {
  std::error_code ignored;
  fs::remove_all(staging_, ignored);
}

void StagedOutput::commit() {
  for (const char* name : kOutputNames) {
    std::error_code ec;
    fs::remove_all(out_ / name, ec);
    if (ec) fail("cannot replace '", (out_ / name).string(), "': ", ec.message());
    const fs::path staged = staging_ / name;
    if (!fs::exists(staged) || (fs::is_directory(staged) && fs::is_empty(staged))) continue;
    fs::rename(staging_ / name, out_ / name, ec);
    if (ec) fail("cannot move output into '", (out_ / name).string(), "': ", ec.message());
  }
}

void check_output_is_free(const std::string& out, bool force) {
  if (force) return;
  for (const char* name : kOutputNames) {
    std::error_code ec;
    if (fs::exists(fs::path(out) / name, ec))
      fail("--out '", out, "' already holds a tokenized corpus ('", name,
           "'); choose another folder, or pass --force to replace it");
  }
}

std::vector<std::string> list_input_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (!fs::is_directory(input, ec)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> listed;
    for (const fs::directory_entry& entry : fs::directory_iterator(input, ec)) {
      if (entry.is_regular_file() && !entry.path().filename().string().starts_with("."))
        listed.push_back(entry.path().string());
    }
    if (ec) fail("cannot list input directory '", input, "': ", ec.message());
    if (listed.empty()) fail("input directory '", input, "' holds no files");
    std::sort(listed.begin(), listed.end());
    files.insert(files.end(), listed.begin(), listed.end());
  }
  return files;
}

}  // namespace strata
