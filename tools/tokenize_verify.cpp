#include <cstdio>
#include <filesystem>

#include "data/token_shards.h"
#include "model/core/error.h"
#include "tools/tokenize_modes.h"
#include "tools/tokenize_output.h"

namespace strata {

int verify_shards(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> splits;
  for (const char* name : {"train", "val"})
    if (std::error_code ec; fs::is_directory(fs::path(dir) / name, ec))
      splits.push_back((fs::path(dir) / name).string());
  if (splits.empty()) splits.push_back(dir);

  std::size_t shards = 0, failed = 0;
  std::uint64_t tokens = 0, chunks = 0;
  std::vector<TokenSource> sources;
  for (const std::string& split : splits) {
    sources.push_back(TokenSource::open(split));
    const TokenSource& source = sources.back();
    for (std::size_t shard = 0; shard < source.shard_count(); ++shard) {
      for (std::uint64_t chunk = 0; chunk < source.chunk_count(shard); ++chunk) {
        try {
          source.check_chunk(shard, chunk);
        } catch (const Error& e) {
          std::fprintf(stderr, "error: %s\n", e.what());
          ++failed;
        }
      }
      chunks += source.chunk_count(shard);
    }
    shards += source.shard_count();
    tokens += source.size();
  }
  std::vector<std::pair<std::string, const TokenSource*>> named;
  for (std::size_t i = 0; i < splits.size(); ++i) named.emplace_back(splits[i], &sources[i]);
  if (const std::string note = missing_checksums_note(named); !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  std::printf("verify: %zu %s, %llu tokens, %llu %s in %s: %s\n", shards,
              plural(shards, "shard", "shards"), static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(chunks),
              plural(static_cast<std::size_t>(chunks), "chunk", "chunks"), dir.c_str(),
              failed == 0 ? "every chunk passes"
                          : (std::to_string(failed) + " failed (see above)").c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace strata
