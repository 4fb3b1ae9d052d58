// Helpers shared by the end-to-end tests: synthetic token shards, temporary directories, running
// the built executables and reading their outputs.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/token_shards.h"
#include "model/core/error.h"
#include "tests/support/error_of.h"
#include "tests/support/test_paths.h"

namespace strata::testing {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = fs::temp_directory_path() / ("strata_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  // STRATA_KEEP_TEST_DIRS=1 keeps it, to read a failing test's runs.
  ~TempDir() {
    if (std::getenv("STRATA_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Tokens from a random first-order Markov chain over `vocab` symbols with a few likely successors
// per symbol: learnable structure, so losses fall quickly. Token 0 is EOS, every ~200 tokens.
// The chain (successor table) is fixed by `vocab`; `seed` only changes the walk, so train and val
// splits share one "language".
inline std::vector<std::int32_t> markov_tokens(int vocab, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 table_rng(1000 + vocab);
  std::vector<std::array<std::int32_t, 3>> next(static_cast<std::size_t>(vocab));
  for (auto& successors : next)
    for (auto& s : successors) s = 1 + static_cast<std::int32_t>(table_rng() % (vocab - 1));
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> tokens(n);
  std::int32_t current = 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 200 == 0) {
      tokens[i] = 0;
      current = 1 + static_cast<std::int32_t>(rng() % (vocab - 1));
      continue;
    }
    current = next[static_cast<std::size_t>(current)][rng() % 3];
    tokens[i] = current;
  }
  return tokens;
}

// Writes `shards` train shards and one val shard of Markov tokens into dir/train and dir/val.
inline void write_synthetic_dataset(const std::string& dir, int vocab, std::size_t train_tokens,
                                    int shards = 2) {
  fs::create_directories(dir + "/train");
  fs::create_directories(dir + "/val");
  const ShardInfo info{vocab, 0, ""};
  const std::vector<std::int32_t> tokens = markov_tokens(vocab, train_tokens, 42);
  const std::size_t per = train_tokens / shards;
  for (int s = 0; s < shards; ++s) {
    const std::size_t begin = s * per, end = s + 1 == shards ? train_tokens : begin + per;
    write_token_shard(dir + "/train/shard_0000" + std::to_string(s) + ".h5",
                      std::span<const std::int32_t>(tokens.data() + begin, end - begin), info);
  }
  const std::vector<std::int32_t> val = markov_tokens(vocab, 20000, 43);
  write_token_shard(dir + "/val/shard_00000.h5", val, info);
}

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// The build's tool (test_paths.h: $STRATA_BIN_DIR overrides, for tests run on another machine).
inline std::string bin(const std::string& tool) { return bin_dir() + "/" + tool; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value of "key" in every metrics.jsonl line that has it, in order.
inline std::vector<double> metric_values(const std::string& metrics_path, const std::string& key) {
  std::vector<double> values;
  std::ifstream in(metrics_path);
  const std::string needle = "\"" + key + "\": ";
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(needle);
    if (at != std::string::npos)
      values.push_back(std::strtod(line.c_str() + at + needle.size(), nullptr));
  }
  return values;
}

inline std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_rmaps_base_oversubscribe=1 "
         "mpirun --oversubscribe -np " +
         std::to_string(ranks) + " ";
}

}  // namespace strata::testing
