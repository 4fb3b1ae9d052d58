// Token shards' chunk checksums (data/shard_checksums.h): each chunk of ids is XXH3-64 of its
// little-endian bytes as stored; an id altered within the vocabulary stops the first read of its
// chunk with one line naming the shard, the chunk and its ids, while reads elsewhere go on; the
// damaged file is left as it was; `tokenize --verify` finds it (exit status 1) and passes an
// untouched corpus (0); and a shard without checksums, written before they existed, still reads,
// with one note.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/shard_set_writer.h"
#include "data/token_shards.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::error_of;
using testing::TempDir;
namespace fs = std::filesystem;

const ShardInfo kInfo{300, 2, std::string(64, 'a')};
// Three whole chunks and a partial one.
constexpr std::size_t kTokens = 3 * kChecksumChunkTokens + 1000;

std::vector<std::int32_t> ramp(std::size_t n, int vocab) {
  std::vector<std::int32_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % vocab);
  return tokens;
}

std::vector<std::int32_t> read_range(const TokenSource& source, std::uint64_t start,
                                     std::size_t count) {
  std::vector<std::int32_t> tokens(count);
  source.read(start, count, tokens.data());
  return tokens;
}

// Sets id `position` of the shard to `id`, in place, as a damaged disk or a stray tool would.
void overwrite_id(const std::string& path, std::uint64_t position, std::uint16_t id) {
  H5File file = H5File::open_write(path);
  const H5Id tokens = open_dataset(file.id(), "tokens");
  const std::uint64_t offset[] = {position}, count[] = {1};
  write_dataset_slab<std::uint16_t>(tokens.get(), offset, count, &id);
}

testing::CommandResult verify(const std::string& dir) {
  return testing::run_command(testing::bin("tokenize") + " --verify " + dir);
}

std::size_t lines_starting(const std::string& text, const std::string& prefix) {
  std::size_t n = 0;
  for (std::size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
    n += text.compare(at, prefix.size(), prefix) == 0 ? 1 : 0;
    if (text.find('\n', at) == std::string::npos) break;
  }
  return n;
}

TEST(ShardChecksums, EachChunkIsXxh3OfItsIdsAsStored) {
  TempDir dir("checksums_layout");
  for (const ShardInfo& info : {kInfo, ShardInfo{100000, 99999, kInfo.tokenizer_sha256}}) {
    const std::vector<std::int32_t> tokens = ramp(kTokens, info.vocab_size);
    const std::string path = dir / ("v" + std::to_string(info.vocab_size) + ".h5");
    write_token_shard(path, tokens, info);
    const H5File file = H5File::open_read(path);
    const std::vector<std::uint64_t> stored = read_dataset<std::uint64_t>(file.id(), "checksums");
    const H5Id checksums = open_dataset(file.id(), "checksums");
    EXPECT_EQ(read_attribute_i64(checksums.get(), "chunk_tokens"), 65536);
    EXPECT_EQ(read_attribute_string(checksums.get(), "algorithm"), "xxh3-64");
    ASSERT_EQ(stored.size(), 4u);
    for (std::size_t chunk = 0; chunk < stored.size(); ++chunk) {
      const std::size_t first = chunk * kChecksumChunkTokens;
      const std::size_t count = std::min<std::size_t>(kChecksumChunkTokens, kTokens - first);
      std::vector<std::uint16_t> narrow(tokens.begin() + first, tokens.begin() + first + count);
      std::vector<std::uint32_t> wide(tokens.begin() + first, tokens.begin() + first + count);
      EXPECT_EQ(stored[chunk], info.vocab_size <= 65536 ? XXH3_64bits(narrow.data(), count * 2)
                                                        : XXH3_64bits(wide.data(), count * 4))
          << "chunk " << chunk << " of vocab " << info.vocab_size;
    }
  }
}

TEST(ShardChecksums, AnIdAlteredWithinTheVocabularyIsCaughtByReadAndVerify) {
  TempDir dir("checksums_altered");
  const std::vector<std::int32_t> tokens = ramp(kTokens, kInfo.vocab_size);
  for (const char* corpus : {"good", "bad"}) {
    fs::create_directories(dir / corpus + "/train");
    fs::create_directories(dir / corpus + "/val");
    write_token_shard(dir / corpus + "/train/shard_00000.h5", tokens, kInfo);
    write_token_shard(dir / corpus + "/val/shard_00000.h5", std::span(tokens).first(5000), kInfo);
  }
  const std::string shard = dir / "bad/train/shard_00000.h5";
  constexpr std::uint64_t kAltered = 2 * kChecksumChunkTokens + 123;  // in chunk 2
  overwrite_id(shard, kAltered, static_cast<std::uint16_t>((tokens[kAltered] + 1) % 300));
  const std::string damaged = testing::read_file(shard);

  const TokenSource source = TokenSource::open(shard);
  // Chunks 0, 1 and 3 are intact: a process that samples only those never stops.
  EXPECT_EQ(read_range(source, 10, 100),
            std::vector<std::int32_t>(tokens.begin() + 10, tokens.begin() + 110));
  EXPECT_NO_THROW(read_range(source, 2 * kChecksumChunkTokens - 50, 50));
  EXPECT_NO_THROW(read_range(source, kTokens - 500, 500));
  const std::string expected = "corrupt token shard '" + shard +
                               "': chunk 2 (tokens 131072 to 196607) fails its checksum (XXH3-64 ";
  for (const std::uint64_t start : {kAltered - 5, 2 * kChecksumChunkTokens - 50}) {
    const std::string error = error_of([&] { read_range(source, start, 100); });
    EXPECT_EQ(error.rfind(expected, 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  EXPECT_EQ(testing::read_file(shard), damaged) << "reading changed the file";

  const testing::CommandResult bad = verify(dir / "bad");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_EQ(lines_starting(bad.output, "error: " + expected), 1u) << bad.output;
  EXPECT_EQ(lines_starting(bad.output, "error: "), 1u) << bad.output;
  EXPECT_NE(bad.output.find("verify: 2 shards, 202608 tokens, 5 chunks in " + (dir / "bad") +
                            ": 1 failed"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(testing::read_file(shard), damaged) << "verifying changed the file";

  const testing::CommandResult good = verify(dir / "good");
  EXPECT_EQ(good.status, 0) << good.output;
  EXPECT_EQ(good.output, "verify: 2 shards, 202608 tokens, 5 chunks in " + (dir / "good") +
                             ": every chunk passes\n");
  // A split (a folder of shards, or one shard) verifies as well as a corpus folder.
  EXPECT_EQ(verify(dir / "bad/val").status, 0);
  EXPECT_EQ(verify(shard).status, 1);
}

TEST(ShardChecksums, AShardWithoutChecksumsStillReadsWithOneNote) {
  TempDir dir("checksums_absent");
  const std::vector<std::int32_t> tokens = ramp(kTokens, kInfo.vocab_size);
  const std::string old = dir / "old/shard_00000.h5";
  fs::create_directories(dir / "old");
  write_token_shard(old, tokens, kInfo);
  {  // as written before checksums existed
    H5File file = H5File::open_write(old);
    ASSERT_GE(H5Ldelete(file.id(), "checksums", H5P_DEFAULT), 0);
  }
  const TokenSource source = TokenSource::open(dir / "old");
  EXPECT_EQ(source.files_without_checksums(), 1u);
  EXPECT_EQ(read_range(source, 0, kTokens), tokens);
  const std::string note = missing_checksums_note({{"data.train", &source}, {"data.val", &source}});
  EXPECT_EQ(note.rfind("note: 2 token shards of data.train, data.val without checksums", 0), 0u)
      << note;
  EXPECT_EQ(note.find('\n'), std::string::npos);

  const testing::CommandResult verified = verify(dir / "old");
  EXPECT_EQ(verified.status, 0) << verified.output;
  EXPECT_EQ(lines_starting(verified.output,
                           "note: 1 token shard of " + (dir / "old") + " without checksums"),
            1u)
      << verified.output;

  // Malformed checksums are a damaged shard, not a missing one.
  const std::string odd = dir / "odd.h5";
  write_token_shard(odd, tokens, kInfo);
  {
    H5File file = H5File::open_write(odd);
    ASSERT_GE(H5Ldelete(file.id(), "checksums", H5P_DEFAULT), 0);
    write_shard_checksums(file.id(), std::vector<std::uint64_t>{1, 2}, kChecksumChunkTokens);
  }
  const std::string error = error_of([&] { TokenSource::open(odd); });
  EXPECT_NE(error.find("is not a valid token shard: /checksums holds 2 checksums, expected 4"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace strata
