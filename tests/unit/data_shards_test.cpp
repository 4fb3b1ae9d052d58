// Token shards and the HDF5 helpers under them: round trips in both element widths, attributes,
// reads across shard boundaries, the three forms of a split spec, and the errors for bad splits.
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/shard_set_writer.h"
#include "data/token_shards.h"
#include "model/core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::error_of;
using testing::TempDir;

std::vector<std::int32_t> ramp(std::size_t n, int vocab, int start = 0) {
  std::vector<std::int32_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>((start + i) % vocab);
  return tokens;
}

std::vector<std::int32_t> read_all(const TokenSource& source) {
  std::vector<std::int32_t> tokens(source.size());
  source.read(0, tokens.size(), tokens.data());
  return tokens;
}

const ShardInfo kSmall{300, 2, "ab12"};

TEST(TokenShards, RoundTripUint16WithAttributes) {
  TempDir dir("shards_u16");
  const std::vector<std::int32_t> tokens = ramp(200000, kSmall.vocab_size);  // > 3 chunks
  write_token_shard(dir / "a.h5", tokens, kSmall);
  EXPECT_FALSE(std::filesystem::exists(dir / "a.h5.tmp"));

  const H5File file = H5File::open_read(dir / "a.h5");
  const H5Id dataset = open_dataset(file.id(), "tokens");
  const H5Id type(H5Dget_type(dataset.get()), H5Tclose);
  EXPECT_EQ(H5Tget_size(type.get()), 2u);
  EXPECT_EQ(H5Tget_sign(type.get()), H5T_SGN_NONE);
  EXPECT_EQ(dataset_dims(dataset.get()), std::vector<std::uint64_t>{200000});
  EXPECT_EQ(read_attribute_i64(file.id(), "vocab_size"), 300);
  EXPECT_EQ(read_attribute_i64(file.id(), "eos_id"), 2);
  EXPECT_EQ(read_attribute_string(file.id(), "tokenizer_sha256"), "ab12");

  const TokenSource source = TokenSource::open(dir / "a.h5");
  EXPECT_EQ(source.size(), 200000u);
  EXPECT_EQ(source.info(), kSmall);
  EXPECT_EQ(read_all(source), tokens);
}

TEST(TokenShards, RoundTripUint32ForLargeVocabularies) {
  TempDir dir("shards_u32");
  const ShardInfo info{100000, 99999, "cafe"};
  std::vector<std::int32_t> tokens = {0, 65535, 65536, 99999, 12345};
  write_token_shard(dir / "b.h5", tokens, info);
  const H5File file = H5File::open_read(dir / "b.h5");
  const H5Id dataset = open_dataset(file.id(), "tokens");
  const H5Id type(H5Dget_type(dataset.get()), H5Tclose);
  EXPECT_EQ(H5Tget_size(type.get()), 4u);
  EXPECT_EQ(read_all(TokenSource::open(dir / "b.h5")), tokens);
}

TEST(TokenShards, RejectsTokensOutsideTheVocabulary) {
  TempDir dir("shards_range");
  const std::vector<std::int32_t> tokens = {1, 2, 300};
  EXPECT_NE(error_of([&] {
              write_token_shard(dir / "c.h5", tokens, kSmall);
            }).find("token 300 at position 2 is outside the vocabulary [0, 300)"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "c.h5"));
  EXPECT_FALSE(std::filesystem::exists(dir / "c.h5.tmp"));
}

TEST(TokenSource, ReadsAcrossShardBoundariesInNameOrder) {
  TempDir dir("shards_multi");
  const std::vector<std::int32_t> all = ramp(1000, kSmall.vocab_size, 7);
  // Written out of order, with an empty shard in the middle: name order defines the stream.
  write_token_shard(dir / "s2.h5", std::span(all).subspan(400), kSmall);
  write_token_shard(dir / "s0.h5", std::span(all).first(150), kSmall);
  write_token_shard(dir / "s1.h5", std::span(all).subspan(150, 250), kSmall);
  write_token_shard(dir / "s1a.h5", std::span(all).first(0), kSmall);
  std::ofstream(dir / "notes.txt") << "not a shard, not *.h5";

  const TokenSource source = TokenSource::open(dir.str());
  ASSERT_EQ(source.files().size(), 4u);
  EXPECT_EQ(source.size(), 1000u);
  EXPECT_EQ(read_all(source), all);
  for (std::uint64_t start : {0, 140, 149, 150, 390, 399, 400, 990}) {
    std::vector<std::int32_t> part(10);
    source.read(start, part.size(), part.data());
    EXPECT_EQ(part, std::vector<std::int32_t>(all.begin() + start, all.begin() + start + 10))
        << "start " << start;
  }
  std::int32_t one = -1;
  source.read(999, 1, &one);
  EXPECT_EQ(one, all[999]);
  EXPECT_NE(error_of([&] { source.read(995, 6, &one); }).find("outside the split of 1000 tokens"),
            std::string::npos);
}

TEST(TokenSource, SpecIsAFileADirectoryOrAGlob) {
  TempDir dir("shards_spec");
  std::filesystem::create_directories(dir / "train");
  write_token_shard(dir / "train/shard_00000.h5", ramp(10, 300), kSmall);
  write_token_shard(dir / "train/shard_00001.h5", ramp(20, 300), kSmall);
  write_token_shard(dir / "train/extra_00000.h5", ramp(40, 300), kSmall);
  EXPECT_EQ(TokenSource::open(dir / "train/shard_00001.h5").size(), 20u);
  EXPECT_EQ(TokenSource::open(dir / "train").size(), 70u);
  EXPECT_EQ(TokenSource::open(dir / "train/shard_*.h5").size(), 30u);
  const std::vector<std::string> files = TokenSource::open(dir / "train/*.h5").files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], dir / "train/extra_00000.h5");
  EXPECT_EQ(files[2], dir / "train/shard_00001.h5");
}

TEST(TokenSource, ErrorsNameTheSpecOrFile) {
  TempDir dir("shards_errors");
  std::filesystem::create_directories(dir / "empty");
  EXPECT_EQ(error_of([&] { TokenSource::open(dir / "nothing"); }),
            "no such file or directory: '" + (dir / "nothing") + "'");
  EXPECT_EQ(error_of([&] { TokenSource::open(dir / "*.h5"); }),
            "no token shard files match '" + (dir / "*.h5") + "'");
  EXPECT_EQ(error_of([&] { TokenSource::open(dir / "empty"); }),
            "no *.h5 token shards in directory '" + (dir / "empty") + "'");

  std::ofstream(dir / "text.h5") << "plain text";
  EXPECT_EQ(error_of([&] { TokenSource::open(dir / "text.h5"); }),
            "'" + (dir / "text.h5") + "' is not an HDF5 file");

  {
    H5File file = H5File::create(dir / "other.h5");
    const std::vector<float> values = {1, 2};
    const std::uint64_t dims[] = {2};
    write_dataset_f32(file.id(), "weights", values, dims);
  }
  EXPECT_NE(error_of([&] {
              TokenSource::open(dir / "other.h5");
            }).find("'" + (dir / "other.h5") + "' is not a valid token shard: missing dataset"),
            std::string::npos);

  std::filesystem::create_directories(dir / "mixed");
  write_token_shard(dir / "mixed/a.h5", ramp(5, 300), kSmall);
  write_token_shard(dir / "mixed/b.h5", ramp(5, 300), ShardInfo{300, 2, "other"});
  const std::string message = error_of([&] { TokenSource::open(dir / "mixed"); });
  EXPECT_NE(message.find("disagree"), std::string::npos) << message;
  EXPECT_NE(message.find(dir / "mixed/b.h5"), std::string::npos) << message;
}

// Extents and chunk layouts a damaged file can claim, which HDF5 would honour by allocating (or
// reading zeros): found by fuzzing (docs/FUZZING.md).
// Validation shards of another tokenizer once gave a val_loss without a word (train and eval).
TEST(TokenSource, ShardsOfAnotherTokenizerAreRefusedByName) {
  TempDir dir("shards_tokenizer");
  const std::string digest(64, 'a'), other(64, 'b');
  write_token_shard(dir / "val.h5", ramp(100, 300), ShardInfo{300, 2, digest});
  write_token_shard(dir / "old.h5", ramp(100, 300), ShardInfo{300, 2, ""});
  const TokenSource val = TokenSource::open(dir / "val.h5");
  EXPECT_NO_THROW(check_shards_tokenizer(val, digest, "data.val"));
  EXPECT_NO_THROW(check_shards_tokenizer(val, "", "data.val"));  // a run without a tokenizer
  const std::string error = error_of([&] { check_shards_tokenizer(val, other, "data.val"); });
  EXPECT_NE(error.find("data.val: the shards ('" + (dir / "val.h5") +
                       "'...) were made with another tokenizer (sha256 aaaaaaaaaaaa..., not "
                       "bbbbbbbbbbbb...)"),
            std::string::npos)
      << error;
  // Shards written before the attribute existed cannot be checked.
  EXPECT_NO_THROW(check_shards_tokenizer(TokenSource::open(dir / "old.h5"), other, "--data"));
}

TEST(TokenSource, RefusesDatasetsThatClaimMoreThanTheFileStores) {
  TempDir dir("shards_claims");
  const auto shard_with = [&](const std::string& name, std::uint64_t extent, std::uint64_t chunk) {
    H5File file = H5File::create(dir / name);
    const std::uint64_t zero[] = {0}, dims[] = {extent}, chunks[] = {chunk};
    H5Id tokens = create_dataset(file.id(), "tokens", H5T_STD_U16LE, zero, chunks, true);
    set_dataset_extent(tokens.get(), dims);
    write_attribute_i64(file.id(), "vocab_size", 300);
    write_attribute_i64(file.id(), "eos_id", 0);
    write_attribute_string(file.id(), "tokenizer_sha256", "");
    file.close();
    return dir / name;
  };
  const std::string unwritten = shard_with("unwritten.h5", std::uint64_t{1} << 40, 1024);
  std::string message = error_of([&] { TokenSource::open(unwritten); });
  EXPECT_NE(message.find("claims 1099511627776 elements of 2 bytes but the file stores 0 bytes"),
            std::string::npos)
      << message;
  const std::string huge_chunks = shard_with("huge_chunks.h5", 10, std::uint64_t{1} << 30);
  message = error_of([&] { TokenSource::open(huge_chunks); });
  EXPECT_NE(message.find("is stored in chunks of 2147483648 bytes"), std::string::npos) << message;
}

TEST(ShardSetWriter, CutsTheStreamIntoNumberedShards) {
  TempDir dir("shards_set");
  const std::vector<std::int32_t> all = ramp(2500, 300);
  ShardSetWriter writer(dir.str(), kSmall, 1000);
  for (std::size_t begin = 0; begin < all.size(); begin += 333) {
    writer.append(std::span(all).subspan(begin, std::min<std::size_t>(333, all.size() - begin)));
  }
  writer.finish();
  EXPECT_EQ(writer.shards(), 3u);
  EXPECT_EQ(writer.tokens(), 2500u);
  const TokenSource source = TokenSource::open(dir.str());
  ASSERT_EQ(source.files().size(), 3u);
  EXPECT_EQ(source.files()[2], dir / "shard_00002.h5");
  EXPECT_EQ(TokenSource::open(dir / "shard_00002.h5").size(), 500u);
  EXPECT_EQ(read_all(source), all);
}

TEST(Hdf5Helpers, DatasetsAndAttributesRoundTrip) {
  TempDir dir("hdf5_helpers");
  const std::vector<float> matrix = {1, 2, 3, 4, 5, 6};
  const std::uint64_t dims[] = {2, 3};
  {
    H5File file = H5File::create(dir / "t.h5");
    write_dataset_f32(file.id(), "/model/h.0.weight", matrix, dims);        // creates /model
    write_attribute_string(file.id(), "config", std::string(100000, 'y'));  // > 64 KiB
    write_attribute_f64(file.id(), "lr", 0.25);
    write_attribute_i64(file.id(), "step", -3);
    write_attribute_i64(file.id(), "step", 7);  // replaces
    const H5Id group = open_group(file.id(), "model");
    write_attribute_string(group.get(), "note", "ünïcode");
    file.close();
  }
  const H5File file = H5File::open_read(dir / "t.h5");
  EXPECT_TRUE(has_object(file.id(), "/model/h.0.weight"));
  EXPECT_FALSE(has_object(file.id(), "/missing/x"));
  EXPECT_EQ(dataset_dims(file.id(), "/model/h.0.weight"), (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(read_dataset_f32(file.id(), "/model/h.0.weight"), matrix);
  std::vector<float> column(2);
  const std::uint64_t offset[] = {0, 1}, count[] = {2, 1};
  read_dataset_slab<float>(open_dataset(file.id(), "/model/h.0.weight").get(), offset, count,
                           column.data());
  EXPECT_EQ(column, (std::vector<float>{2, 5}));
  EXPECT_EQ(read_attribute_string(file.id(), "config").size(), 100000u);
  EXPECT_EQ(read_attribute_f64(file.id(), "lr"), 0.25);
  EXPECT_EQ(read_attribute_i64(file.id(), "step"), 7);
  EXPECT_EQ(read_attribute_string(open_object(file.id(), "/model").get(), "note"), "ünïcode");
  EXPECT_NE(error_of([&] { read_attribute_i64(file.id(), "lr"); }).find("is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              read_dataset_f32(file.id(), "/model/nope");
            }).find("missing dataset '/model/nope' of '" + (dir / "t.h5") + "'"),
            std::string::npos);
  std::vector<float> wrong(5);
  EXPECT_NE(error_of([&] {
              read_dataset_f32(file.id(), "/model/h.0.weight", wrong);
            }).find("holds 6 elements, expected 5"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
