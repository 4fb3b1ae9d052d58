#include "data/shard_set_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "model/core/error.h"

namespace strata {

std::string shard_file_name(std::size_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard_%05zu.h5", index);
  return name;
}

ShardSetWriter::ShardSetWriter(std::string directory, ShardInfo info, std::uint64_t shard_tokens)
    : directory_(std::move(directory)), info_(std::move(info)), shard_tokens_(shard_tokens) {
  if (shard_tokens_ == 0) fail("tokens per shard must be at least 1");
}

void ShardSetWriter::append(std::span<const std::int32_t> tokens) {
  while (!tokens.empty()) {
    if (!current_) {
      const auto path = std::filesystem::path(directory_) / shard_file_name(shards_);
      current_.emplace(path.string(), info_);
      ++shards_;
    }
    const std::uint64_t room = shard_tokens_ - current_->size();
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(room, tokens.size()));
    current_->append(tokens.first(take));
    tokens = tokens.subspan(take);
    tokens_ += take;
    if (current_->size() == shard_tokens_) {
      current_->finish();
      current_.reset();
    }
  }
}

void ShardSetWriter::finish() {
  if (current_) {
    current_->finish();
    current_.reset();
  }
}

}  // namespace strata
