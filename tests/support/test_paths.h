// Where a test finds the repository and the build's tools, found at run time rather than compiled
// in. A test executable lives in <build>/tests/ (tests/CMakeLists.txt), so its build folder is the
// parent of its own folder, and the repository is the one that build's CMakeCache.txt names. A
// compile line that named the clone's folder (a -D of an absolute path) would make every test's
// object differ between clones and miss the compiler cache (scripts/compiler_cache.sh).
// $STRATA_BIN_DIR and $STRATA_SOURCE_DIR override both (tests run on a GPU host from a copy of the
// tools, scripts/gpu_check.sh).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/core/error.h"

namespace strata::testing {

// <build>: the parent of the folder of this test executable.
inline std::filesystem::path build_dir() {
  static const std::filesystem::path dir =
      std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path();
  return dir;
}

// The repository root: $STRATA_SOURCE_DIR, else CMAKE_HOME_DIRECTORY of <build>/CMakeCache.txt.
inline std::string source_dir() {
  if (const char* dir = std::getenv("STRATA_SOURCE_DIR")) return dir;
  static const std::string dir = [] {
    const std::filesystem::path cache = build_dir() / "CMakeCache.txt";
    std::ifstream in(cache);
    const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
    for (std::string line; std::getline(in, line);)
      if (line.starts_with(key)) return line.substr(key.size());
    fail("test_paths: no ", key, " in ", cache.string(),
         " (set STRATA_SOURCE_DIR to the repository root)");
  }();
  return dir;
}

// The build's executables: $STRATA_BIN_DIR, else <build>/bin.
inline std::string bin_dir() {
  if (const char* dir = std::getenv("STRATA_BIN_DIR")) return dir;
  return (build_dir() / "bin").string();
}

}  // namespace strata::testing
