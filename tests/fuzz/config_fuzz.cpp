// Fuzz target: the YAML config loader with --set overrides (plan/config.h).
//
// Input: YAML text; the lines after a line "#overrides" (a YAML comment, so a seed stays a valid
// config) are overrides "key.path=value". A rejected config must be a strata::Error. An accepted
// one must survive the round trip through config_to_yaml unchanged, and resolving its layout on
// worlds of 1 to 8 ranks may only accept it or reject it with a strata::Error.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "plan/config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string yaml = input;
  std::vector<std::string> overrides;
  const std::string marker = "#overrides\n";
  if (const std::size_t at = input.find(marker); at != std::string::npos) {
    yaml = input.substr(0, at);
    std::istringstream lines(input.substr(at + marker.size()));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }
  strata::fuzz::expect_user_errors_only([&] {
    const strata::Config config = strata::parse_config(yaml, "fuzz.yaml", overrides);
    const strata::Config again = strata::parse_config(strata::config_to_yaml(config), "round trip");
    if (!(again == config)) {
      std::fprintf(stderr, "fuzz finding: config_to_yaml does not round-trip\n");
      std::abort();
    }
    for (int world = 1; world <= 8; ++world)
      strata::fuzz::expect_user_errors_only([&] { strata::resolve_mesh(config, world); });
  });
  return 0;
}
