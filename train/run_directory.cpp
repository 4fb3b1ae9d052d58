// claim_run_directory (run_directory.h): a fresh run refuses, or with --overwrite replaces, an
// earlier run's files.
#include "train/run_directory.h"

#include <filesystem>
#include <iostream>

#include "model/core/error.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

EarlierRun earlier_run(const Config& config) {
  EarlierRun earlier;
  for (const char* name : {"metrics.jsonl", "config.yaml"}) {
    const fs::path path = fs::path(config.run_directory()) / name;
    if (fs::exists(path)) earlier.records.push_back(path.string());
  }
  for (const auto& [step, path] : list_checkpoints(config.checkpoint_directory()))
    earlier.checkpoints.push_back(path);
  return earlier;
}

void claim_run_directory(const Config& config, bool overwrite) {
  const EarlierRun earlier = earlier_run(config);
  if (earlier.empty()) return;
  if (!overwrite) {
    std::string what;
    for (const std::string& path : earlier.records) what += (what.empty() ? "" : ", ") + path;
    if (const std::size_t n = earlier.checkpoints.size(); n > 0)
      what += (what.empty() ? "" : " and ") + std::to_string(n) + " checkpoint" +
              (n == 1 ? "" : "s") + " in " + config.checkpoint_directory();
    fail("run '", config.run.name, "' already holds an earlier run (", what,
         "); use --resume to continue it, another run.name, or --overwrite to replace it");
  }
  for (const std::string& path : earlier.checkpoints) {
    std::error_code error;
    if (!fs::remove(path, error) && error)
      fail("--overwrite: cannot remove the earlier run's checkpoint '", path,
           "': ", error.message());
  }
  const std::size_t n = earlier.checkpoints.size();
  std::cout << "--overwrite: run '" << config.run.name << "' starts afresh in "
            << config.run_directory() << " (" << n << " earlier checkpoint" << (n == 1 ? "" : "s")
            << " removed, its metrics and config rewritten)\n";
}

}  // namespace strata
