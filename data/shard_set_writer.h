// Writes one split's token stream as numbered shards: <directory>/shard_00000.h5, shard_00001.h5,
// ..., each holding at most `shard_tokens` tokens (the last one fewer). The stream is cut at exact
// token counts, so a document may continue from one shard into the next; readers see the shards,
// in name order, as one stream (TokenSource). Memory use is independent of the shard size: tokens
// go straight to the open shard (TokenShardWriter).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "data/token_shards.h"

namespace strata {

class ShardSetWriter {
 public:
  // `directory` must exist. strata::Error if shard_tokens is 0.
  ShardSetWriter(std::string directory, ShardInfo info, std::uint64_t shard_tokens);

  void append(std::span<const std::int32_t> tokens);
  // Completes the last shard. A split that received no tokens has no shards.
  void finish();

  std::uint64_t tokens() const { return tokens_; }
  std::size_t shards() const { return shards_; }

 private:
  std::string directory_;
  ShardInfo info_;
  std::uint64_t shard_tokens_;
  std::optional<TokenShardWriter> current_;
  std::uint64_t tokens_ = 0;
  std::size_t shards_ = 0;  // shards started so far
};

// "shard_00042.h5": the name of shard `index` (five digits, so names sort in stream order up to
// 100000 shards).
std::string shard_file_name(std::size_t index);

}  // namespace strata
