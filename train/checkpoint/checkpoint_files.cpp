// The checkpoints of a directory (train/checkpoint/checkpoint.h): their names, listing, the
// newest, and pruning to checkpoint.keep.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "model/core/error.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {
namespace fs = std::filesystem;

std::string checkpoint_file_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return name;
}

namespace {
// The step of a checkpoint file name "step_<8 or more digits>.h5", or -1 for any other name.
std::int64_t checkpoint_step(const std::string& name) {
  constexpr std::string_view prefix = "step_", suffix = ".h5";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() < 8 || digits.size() > 18) return -1;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}
}  // namespace

std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(const std::string& directory) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code error;
  if (!fs::is_directory(directory, error)) return found;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::int64_t step = checkpoint_step(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file()) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  const auto found = list_checkpoints(directory);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

void prune_checkpoints(const std::string& directory, int keep) {
  if (keep <= 0) return;
  const auto found = list_checkpoints(directory);
  for (std::size_t i = 0; i + keep < found.size(); ++i) fs::remove(found[i].second);
}

}  // namespace strata
