// `tokenize --from-tokens` end to end on token files written here in llm.c's layout (a 1024-byte
// header, an EOS before every document, documents running on across files) and nanoGPT's (uint16
// ids only, an EOS after every document): the shards hold exactly the input ids, cut into
// documents at the EOS id as data/token_files.h states, split into train and val by whole
// documents, with tokenizer_sha256 "none" and no tokenizer.model; `train` runs on them and `eval`
// reads them, and `generate` refuses the checkpoint in one line; each bad input is one `error:`
// line naming its file, and writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/split.h"
#include "data/token_shards.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

constexpr int kVocab = 50257, kEos = 50256;  // GPT-2's, as llm.c and nanoGPT use them

// Documents of 0 to 40 random ids below the EOS; the empty one shows that an empty document
// survives the conversion as a lone EOS.
std::vector<std::vector<std::int32_t>> make_documents(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::int32_t>> documents(n);
  for (std::size_t d = 0; d < n; ++d) {
    documents[d].resize(d == 3 ? 0 : 1 + rng() % 40);
    for (std::int32_t& id : documents[d]) id = static_cast<std::int32_t>(rng() % kEos);
  }
  return documents;
}

template <class Id>
void write_ids(std::ofstream& out, std::span<const std::int32_t> ids) {
  for (const std::int32_t id : ids) {
    const Id value = static_cast<Id>(id);
    out.write(reinterpret_cast<const char*>(&value), sizeof value);
  }
}

// llm.c's dev/data/data_common.py layout: 256 int32 (magic, version, count, zeros), then the ids.
template <class Id = std::uint16_t>
void write_llmc(const std::string& path, std::span<const std::int32_t> ids,
                std::int32_t magic = 20240520, std::int32_t version = 1, std::int64_t count = -1) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count < 0 ? static_cast<std::int64_t>(ids.size()) : count);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  write_ids<Id>(out, ids);
}

void write_raw(const std::string& path, std::span<const std::int32_t> ids) {
  std::ofstream out(path, std::ios::binary);
  write_ids<std::uint16_t>(out, ids);
}

std::vector<std::int32_t> read_split(const std::string& spec) {
  const TokenSource source = TokenSource::open(spec);
  std::vector<std::int32_t> tokens(source.size());
  source.read(0, tokens.size(), tokens.data());
  return tokens;
}

testing::CommandResult tokenize(const std::string& args) {
  return testing::run_command(testing::bin("tokenize") + " " + args);
}

// Fails unless `run` ended with status 1 and one line, `error: ...` holding `needle`.
void expect_error(const testing::CommandResult& run, const std::string& needle) {
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_TRUE(run.output.starts_with("error: ")) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find(needle), std::string::npos)
      << "'" << needle << "' not in " << run.output;
}

// The train and val streams that documents split by choose_validation_documents give, each
// document followed by EOS.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> expected_splits(
    const std::vector<std::vector<std::int32_t>>& documents, double val_fraction) {
  const std::vector<bool> is_validation =
      choose_validation_documents(documents.size(), val_fraction);
  std::vector<std::int32_t> train, val;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    std::vector<std::int32_t>& split = is_validation[d] ? val : train;
    split.insert(split.end(), documents[d].begin(), documents[d].end());
    split.push_back(kEos);
  }
  return {train, val};
}

const char* const kArgs = " --vocab-size 50257 --eos-id 50256 --val-fraction 0.2";

TEST(TokenizeFromTokens, LlmcFilesGiveTheirDocumentsWithTheEosMovedAfterEach) {
  TempDir dir("from_tokens_llmc");
  const auto documents = make_documents(40, 1);
  std::vector<std::int32_t> stream;  // llm.c: EOS, then the document
  for (const auto& document : documents) {
    stream.push_back(kEos);
    stream.insert(stream.end(), document.begin(), document.end());
  }
  // Cut mid-document, as llm.c cuts its shards at exact token counts.
  const std::size_t cut = stream.size() / 2 + 1;
  write_llmc(dir / "fineweb_000001.bin", std::span(stream).first(cut));
  write_llmc(dir / "fineweb_000002.bin", std::span(stream).subspan(cut));
  const testing::CommandResult run =
      tokenize("--from-tokens " + (dir / "fineweb_000001.bin") + " " +
               (dir / "fineweb_000002.bin") + " --format llmc --out " + (dir / "out") + kArgs);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("tokenize: 40 documents ("), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("the EOS before each document now follows it"), std::string::npos);

  const auto [train, val] = expected_splits(documents, 0.2);
  ASSERT_FALSE(val.empty());
  EXPECT_EQ(read_split(dir / "out/train"), train);
  EXPECT_EQ(read_split(dir / "out/val"), val);
  EXPECT_EQ(TokenSource::open(dir / "out/train").info(), (ShardInfo{kVocab, kEos, "none"}));
  EXPECT_FALSE(fs::exists(dir / "out/tokenizer.model"));
  EXPECT_EQ(tokenize("--verify " + (dir / "out")).status, 0);

  // Llama 3's llm.c files: magic 20240801, version 7, uint32 ids.
  std::vector<std::int32_t> wide = {kEos, 70000, 5, kEos, 127999};
  write_llmc<std::uint32_t>(dir / "llama.bin", wide, 20240801, 7);
  ASSERT_EQ(tokenize("--from-tokens " + (dir / "llama.bin") + " --format llmc --out " +
                     (dir / "llama") + " --vocab-size 128256 --eos-id 50256 --val-fraction 0")
                .status,
            0);
  EXPECT_EQ(read_split(dir / "llama/train"),
            (std::vector<std::int32_t>{70000, 5, kEos, 127999, kEos}));
}

TEST(TokenizeFromTokens, NanoGptFilesComeThroughUnchanged) {
  TempDir dir("from_tokens_raw");
  const auto documents = make_documents(30, 2);
  std::vector<std::int32_t> stream;  // nanoGPT: the document, then EOS
  for (const auto& document : documents) {
    stream.insert(stream.end(), document.begin(), document.end());
    stream.push_back(kEos);
  }
  write_raw(dir / "train.bin", stream);
  const testing::CommandResult run =
      tokenize("--from-tokens " + (dir / "train.bin") + " --format raw-uint16 --out " +
               (dir / "out") + kArgs + " --shard-tokens 200");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output.find("now follows"), std::string::npos) << run.output;
  const auto [train, val] = expected_splits(documents, 0.2);
  EXPECT_GT(TokenSource::open(dir / "out/train").files().size(), 1u);
  EXPECT_EQ(read_split(dir / "out/train"), train);
  EXPECT_EQ(read_split(dir / "out/val"), val);

  // A stream without any EOS is one document: it gets one.
  write_raw(dir / "shakespeare.bin", documents[0]);
  ASSERT_EQ(tokenize("--from-tokens " + (dir / "shakespeare.bin") + " --format raw-uint16 --out " +
                     (dir / "one") + " --vocab-size 50257 --eos-id 50256 --val-fraction 0")
                .status,
            0);
  std::vector<std::int32_t> one = documents[0];
  one.push_back(kEos);
  EXPECT_EQ(read_split(dir / "one/train"), one);
}

TEST(TokenizeFromTokens, BadInputsFailWithOneErrorLineNamingTheFile) {
  TempDir dir("from_tokens_bad");
  const std::string out = " --out " + (dir / "out");
  const std::string raw = " --format raw-uint16 --vocab-size 50257 --eos-id 50256" + out;
  const std::string llmc = " --format llmc --vocab-size 50257 --eos-id 50256" + out;
  const std::vector<std::int32_t> ids = {1, 2, kEos, 3, 4, kEos};

  const std::string too_large = dir / "too_large.bin";
  write_raw(too_large, std::vector<std::int32_t>{1, 2, kEos, 50300, kEos});
  expect_error(tokenize("--from-tokens " + too_large + raw),
               "token file '" + too_large +
                   "': id 50300 at position 3 is outside the vocabulary [0, 50257)");
  const std::string odd = dir / "odd.bin";
  std::ofstream(odd, std::ios::binary) << "abc";
  expect_error(tokenize("--from-tokens " + odd + raw),
               "token file '" + odd + "' has 3 bytes, not a whole number of 2-byte ids");
  const std::string magic = dir / "magic.bin";
  write_llmc(magic, ids, 20240521);
  expect_error(tokenize("--from-tokens " + magic + llmc),
               "'" + magic + "' is not an llm.c token file: its header's magic is 20240521");
  const std::string version = dir / "version.bin";
  write_llmc(version, ids, 20240520, 2);
  expect_error(tokenize("--from-tokens " + version + llmc),
               "llm.c token file '" + version + "' has header version 2 with magic 20240520");
  const std::string count = dir / "count.bin";
  write_llmc(count, ids, 20240520, 1, 7);
  expect_error(tokenize("--from-tokens " + count + llmc),
               "llm.c token file '" + count +
                   "': its header says 7 tokens (14 bytes) but the file holds 12 bytes");
  const std::string short_file = dir / "short.bin";
  write_raw(short_file, ids);
  expect_error(tokenize("--from-tokens " + short_file + llmc),
               "'" + short_file + "' is not an llm.c token file: it has 12 bytes");
  const std::string llmc_file = dir / "llmc.bin";
  write_llmc(llmc_file, ids);
  expect_error(tokenize("--from-tokens " + llmc_file + raw),
               "token file '" + llmc_file + "' starts with llm.c's header");

  // The flags.
  expect_error(tokenize("--from-tokens " + llmc_file +
                        " --format bin --vocab-size 50257 "
                        "--eos-id 50256" +
                        out),
               "--format must be llmc");
  expect_error(tokenize("--from-tokens " + llmc_file + " --format llmc --vocab-size 50257" + out),
               "--from-tokens needs --eos-id");
  expect_error(tokenize("--from-tokens " + llmc_file +
                        " --format llmc --vocab-size 100 "
                        "--eos-id 100" +
                        out),
               "--eos-id 100 is outside the vocabulary [0, 100)");
  expect_error(tokenize("--from-tokens " + llmc_file + llmc + " --tokenizer x.model"),
               "--tokenizer does not go with --from-tokens");
  expect_error(tokenize("--input " + llmc_file + " --eos-id 3" + out), "--eos-id does not go");
  expect_error(tokenize("--verify " + (dir / "out") + " --force"), "--verify DIR takes no other");
  EXPECT_FALSE(fs::exists(dir / "out/train"));
}

TEST(TokenizeFromTokens, TrainAndEvalTakeTheIdsAndGenerateRefusesTheirCheckpoint) {
  TempDir dir("from_tokens_train");
  // Learnable ids (EOS 0), in llm.c's layout.
  std::vector<std::int32_t> stream = testing::markov_tokens(64, 40000, 7);
  stream.insert(stream.begin(), 0);
  write_llmc(dir / "tokens.bin", stream);
  const testing::CommandResult converted =
      tokenize("--from-tokens " + (dir / "tokens.bin") + " --format llmc --vocab-size 64 " +
               "--eos-id 0 --val-fraction 0.1 --out " + (dir / "data"));
  ASSERT_EQ(converted.status, 0) << converted.output;
  // The validation shard as written before checksums existed: read with one note.
  {
    H5File file = H5File::open_write(dir / "data/val/shard_00000.h5");
    ASSERT_GE(H5Ldelete(file.id(), "checksums", H5P_DEFAULT), 0);
  }

  const std::string config = dir / "run.yaml";
  std::ofstream(config) << "run: {name: ids, dir: " << dir.str() << "/runs, seed: 5}\n"
                        << "model: {n_layer: 1, n_head: 2, d_model: 32, seq_len: 16, "
                           "vocab_size: 64}\n"
                        << "data: {train: " << dir.str() << "/data/train, val: " << dir.str()
                        << "/data/val}\n"
                        << "train: {steps: 2, global_batch: 4, micro_batch: 2, eval_every: 2, "
                           "eval_tokens: 256, log_every: 1}\n"
                        << "checkpoint: {every: 0, keep: 1}\n"
                        << "device: cpu\n";
  const testing::CommandResult trained =
      testing::run_command("OMP_NUM_THREADS=1 " + testing::bin("train") + " " + config);
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_EQ(testing::metric_values(dir / "runs/ids/metrics.jsonl", "val_loss").size(), 1u);
  const std::string note = "note: 1 token shard of data.val without checksums";
  EXPECT_NE(trained.output.find(note), std::string::npos) << trained.output;
  EXPECT_EQ(trained.output.find(note), trained.output.rfind(note)) << "one note";

  const std::string checkpoint = dir / "runs/ids/checkpoints/step_00000002.h5";
  const testing::CommandResult evaluated = testing::run_command(
      testing::bin("eval") + " --checkpoint " + checkpoint + " --data " + (dir / "data/train"));
  EXPECT_EQ(evaluated.status, 0) << evaluated.output;
  EXPECT_NE(evaluated.output.find("val_loss "), std::string::npos) << evaluated.output;

  expect_error(
      testing::run_command(testing::bin("generate") + " --checkpoint " + checkpoint +
                           " --prompt Hello"),
      "error: checkpoint '" + checkpoint + "' was trained on token shards without a tokenizer");
}

}  // namespace
}  // namespace strata
