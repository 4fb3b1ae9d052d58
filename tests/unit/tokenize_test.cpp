// The `tokenize` tool end to end: on a small generated corpus (plain text and .jsonl inputs) the
// shards hold exactly SentencePiece's ids of each document followed by EOS, in input order, split
// into train and val by whole documents; the output does not depend on the thread count, nor on
// whether the inputs are compressed, mixed or given as a directory; --text-field and the training
// sample's cap do what they say; and every bad input ends with exit status 1 and a single
// `error:` line naming the culprit.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "data/documents.h"
#include "data/split.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "tests/support/compression_support.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::gzip_member;
using testing::TempDir;
using testing::zstd_frame;
namespace fs = std::filesystem;

struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

RunResult run_tokenize(const std::string& args, const TempDir& scratch) {
  const std::string out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  const std::string command = testing::bin_dir() + "/tokenize " + args + " >" + out + " 2>" + err;
  const int raw = std::system(command.c_str());
  RunResult result;
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  result.out = slurp(out);
  result.err = slurp(err);
  return result;
}

// English-like text from a fixed word list: deterministic, a few KB per call.
std::string make_text(std::mt19937& rng, int sentences) {
  static const std::vector<std::string> words = {
      "the",   "a",     "model",  "learns", "from",  "data",  "every", "token", "is",
      "one",   "small", "piece",  "of",     "text",  "while", "large", "runs",  "train",
      "for",   "many",  "hours",  "and",    "then",  "stop",  "when",  "loss",  "falls",
      "below", "their", "target", "quick",  "brown", "fox",   "jumps", "over",  "lazy",
      "dog",   "café",  "naïve",  "2024",   "42",    "über",  "résumé"};
  std::string text;
  for (int s = 0; s < sentences; ++s) {
    const int length = 4 + static_cast<int>(rng() % 9);
    for (int w = 0; w < length; ++w) {
      std::string word = words[rng() % words.size()];
      if (w == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      text += word + (w + 1 < length ? " " : "");
    }
    text += (rng() % 5 == 0) ? ".\n" : ". ";
  }
  return text;
}

// JSON string escaping for the generated text (quotes, backslashes, newlines, tabs).
std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// Splits a token stream at EOS into documents' ids.
std::vector<std::vector<int>> split_at_eos(const std::vector<std::int32_t>& tokens, int eos) {
  std::vector<std::vector<int>> documents(1);
  for (std::int32_t token : tokens) {
    if (token == eos) {
      documents.emplace_back();
    } else {
      documents.back().push_back(token);
    }
  }
  EXPECT_TRUE(documents.back().empty()) << "stream does not end with EOS";
  documents.pop_back();
  return documents;
}

std::vector<std::int32_t> read_split(const std::string& spec) {
  const TokenSource source = TokenSource::open(spec);
  std::vector<std::int32_t> tokens(source.size());
  source.read(0, tokens.size(), tokens.data());
  return tokens;
}

class TokenizeTool : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(5);
    for (int i = 0; i < 6; ++i) {
      inputs_.push_back(dir_ / ("doc" + std::to_string(i) + ".txt"));
      std::ofstream(inputs_.back(), std::ios::binary) << make_text(rng, 25 + i * 5);
    }
    inputs_.push_back(dir_ / "more.jsonl");
    std::ofstream jsonl(inputs_.back(), std::ios::binary);
    for (int i = 0; i < 5; ++i) {
      jsonl << "{\"id\": " << i << ", \"text\": \"" << json_escape(make_text(rng, 6))
            << "\\tend \\u00e9\\ud83d\\ude00\"}\n";
    }
  }
  std::string input_args() const {
    std::string args = "--input";
    for (const std::string& input : inputs_) args += " " + input;
    return args;
  }

  TempDir dir_{"tokenize_tool"};
  std::vector<std::string> inputs_;
};

TEST_F(TokenizeTool, ShardsHoldEachDocumentsIdsThenEos) {
  const std::string out = dir_ / "out";
  const RunResult run = run_tokenize(input_args() + " --out " + out +
                                         " --vocab-size 400 --threads 2 --val-fraction 0.2"
                                         " --shard-tokens 700",
                                     dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err, "");  // not a terminal: no progress notes
  EXPECT_NE(run.out.find("11 documents"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("tokens/s"), std::string::npos) << run.out;

  const Tokenizer tokenizer = Tokenizer::load(out + "/tokenizer.model");
  EXPECT_EQ(tokenizer.vocab_size(), 400);
  std::vector<std::string> documents;
  for (const std::string& input : inputs_) {
    for (std::string& document : read_documents(input)) documents.push_back(std::move(document));
  }
  ASSERT_EQ(documents.size(), 11u);
  const std::vector<bool> is_validation = choose_validation_documents(documents.size(), 0.2);

  std::vector<std::int32_t> expected_train, expected_val;
  std::vector<std::string> train_texts, val_texts;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    auto& expected = is_validation[i] ? expected_val : expected_train;
    for (int id : tokenizer.encode(documents[i])) expected.push_back(id);
    expected.push_back(tokenizer.eos_id());
    (is_validation[i] ? val_texts : train_texts).push_back(documents[i]);
  }
  ASSERT_FALSE(val_texts.empty());
  ASSERT_FALSE(train_texts.empty());

  const TokenSource train = TokenSource::open(out + "/train");
  EXPECT_GT(train.files().size(), 1u);  // --shard-tokens 700 cuts the stream
  EXPECT_EQ(train.info(), (ShardInfo{400, tokenizer.eos_id(), tokenizer.sha256()}));
  EXPECT_EQ(read_split(out + "/train"), expected_train);
  EXPECT_EQ(read_split(out + "/val"), expected_val);

  // Lossless: every document decodes back to its text.
  const std::vector<std::vector<int>> train_ids =
      split_at_eos(read_split(out + "/train"), tokenizer.eos_id());
  ASSERT_EQ(train_ids.size(), train_texts.size());
  for (std::size_t i = 0; i < train_ids.size(); ++i) {
    EXPECT_EQ(tokenizer.decode(train_ids[i]), train_texts[i]);
  }
  EXPECT_FALSE(fs::exists(out + "/train/shard_00000.h5.tmp"));
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".")) << entry.path();
  }

  // Same corpus with one thread and the trained model: identical shards.
  const std::string again = dir_ / "again";
  const RunResult rerun = run_tokenize(input_args() + " --out " + again + " --tokenizer " + out +
                                           "/tokenizer.model --threads 1 --val-fraction 0.2",
                                       dir_);
  ASSERT_EQ(rerun.status, 0) << rerun.err;
  EXPECT_EQ(read_split(again + "/train"), expected_train);
  EXPECT_EQ(slurp(again + "/tokenizer.model"), tokenizer.serialized());
}

// Runs the tool expecting failure: status 1, and stderr is one `error:` line containing `needle`.
void expect_error(const RunResult& run, const std::string& needle) {
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  ASSERT_TRUE(run.err.starts_with("error: ")) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_TRUE(run.err.ends_with("\n")) << run.err;
  EXPECT_NE(run.err.find(needle), std::string::npos) << "'" << needle << "' not in: " << run.err;
}

TEST_F(TokenizeTool, ValFractionZeroWritesNoValidationSplit) {
  const std::string out = dir_ / "noval";
  fs::create_directories(out + "/val");  // stale output of an earlier run is replaced (--force)
  std::ofstream(out + "/val/shard_00000.h5") << "stale";
  const RunResult run =
      run_tokenize("--input " + inputs_[0] + " --input " + inputs_[1] + " --out " + out +
                       " --vocab-size 400 --val-fraction 0 --force",
                   dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(fs::exists(out + "/train/shard_00000.h5"));
  EXPECT_FALSE(fs::exists(out + "/val"));
}

// tokenize into a folder holding a corpus once replaced its tokenizer and shards and deleted its
// val/ without a word, while train refuses to overwrite checkpoints.
TEST_F(TokenizeTool, AnExistingCorpusIsReplacedOnlyWithForce) {
  const std::string out = dir_ / "kept";
  const std::string args = input_args() + " --out " + out + " --vocab-size 400 --threads 1";
  ASSERT_EQ(run_tokenize(args, dir_).status, 0);
  const std::string tokenizer = slurp(out + "/tokenizer.model");
  const std::string train = slurp(out + "/train/shard_00000.h5");
  const std::string val = slurp(out + "/val/shard_00000.h5");

  const RunResult refused = run_tokenize(
      "--input " + inputs_[0] + " " + inputs_[1] + " --out " + out + " --vocab-size 350", dir_);
  expect_error(refused, "--out '" + out +
                            "' already holds a tokenized corpus ('tokenizer.model')"
                            "; choose another folder, or pass --force to replace it");
  EXPECT_EQ(slurp(out + "/tokenizer.model"), tokenizer);
  EXPECT_EQ(slurp(out + "/train/shard_00000.h5"), train);
  EXPECT_EQ(slurp(out + "/val/shard_00000.h5"), val);

  const RunResult forced = run_tokenize(
      "--input " + inputs_[0] + " " + inputs_[1] + " --out " + out + " --vocab-size 350 --force",
      dir_);
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_NE(slurp(out + "/tokenizer.model"), tokenizer);
  EXPECT_EQ(TokenSource::open(out + "/train").info().vocab_size, 350);
}

// One large plain-text file (one document by the contract) once gave "1 documents (1 train, 0
// val)" with --val-fraction 0.1, and train then stopped on a missing val/.
TEST_F(TokenizeTool, ACorpusWithoutValidationDocumentsIsAnErrorThatSaysHowToSplitIt) {
  const std::string book = dir_ / "book.txt";
  std::mt19937 rng(9);
  {
    std::ofstream file(book, std::ios::binary);
    const auto line = [&](int sentences) {  // make_text's sentences, without its line breaks
      std::string text = make_text(rng, sentences);
      std::replace(text.begin(), text.end(), '\n', ' ');
      return text;
    };
    for (int paragraph = 0; paragraph < 30; ++paragraph)
      file << line(4) << "\n" << line(3) << "\n\n";
  }
  const std::string out = dir_ / "book";
  expect_error(run_tokenize("--input " + book + " --out " + out +
                                " --vocab-size 400 "
                                "--val-fraction 0.1",
                            dir_),
               "--val-fraction 0.1 holds out no document: the corpus has 1 document (a plain-text "
               "file is one); cut it with --split paragraphs or --split lines, or pass "
               "--val-fraction 0 for no validation set");
  EXPECT_FALSE(fs::exists(out + "/train"));

  const RunResult paragraphs = run_tokenize("--input " + book + " --out " + out +
                                                " --vocab-size 400 --val-fraction 0.1 --split "
                                                "paragraphs --threads 1",
                                            dir_);
  ASSERT_EQ(paragraphs.status, 0) << paragraphs.err;
  EXPECT_NE(paragraphs.out.find("tokenize: 30 documents ("), std::string::npos) << paragraphs.out;
  EXPECT_TRUE(fs::exists(out + "/val/shard_00000.h5"));

  const RunResult lines = run_tokenize("--input " + book + " --out " + (dir_ / "lines") +
                                           " --vocab-size 400 --split lines --threads 1",
                                       dir_);
  ASSERT_EQ(lines.status, 0) << lines.err;
  EXPECT_NE(lines.out.find("tokenize: 60 documents ("), std::string::npos) << lines.out;
  expect_error(run_tokenize("--input " + book + " --out " + (dir_ / "x") + " --split words", dir_),
               "--split must be file, paragraphs or lines, got 'words'");
}

TEST_F(TokenizeTool, BadInputsFailWithOneErrorLine) {
  const std::string out = " --out " + (dir_ / "bad_out");
  const std::string missing = dir_ / "missing.txt";
  expect_error(run_tokenize("--input " + missing + out, dir_), missing);

  const std::string empty = dir_ / "empty.txt";
  std::ofstream(empty).flush();
  expect_error(run_tokenize("--input " + inputs_[0] + " " + empty + out, dir_),
               empty + "' is empty");

  const std::string latin1 = dir_ / "latin1.txt";
  std::ofstream(latin1, std::ios::binary) << "caf\xE9 au lait";
  expect_error(run_tokenize("--input " + latin1 + out, dir_), latin1 + "' is not valid UTF-8");

  const std::string bad_jsonl = dir_ / "bad.jsonl";
  std::ofstream(bad_jsonl, std::ios::binary) << "{\"text\": \"fine\"}\n{\"text\": 3}\n";
  expect_error(run_tokenize("--input " + bad_jsonl + out, dir_), bad_jsonl + ":2: column 10");

  expect_error(run_tokenize(input_args() + out + " --vocab-size 100000", dir_),
               "tokenizer training on '" + inputs_[0] + "', '" + inputs_[1] +
                   "' and 5 more files failed: Vocabulary size too high");
  expect_error(
      run_tokenize("--input " + inputs_[0] + out + " --vocab-size 50 --val-fraction 0", dir_),
      "tokenizer training on '" + inputs_[0] + "' failed: Vocabulary size is smaller");
  EXPECT_FALSE(fs::exists(dir_ / "bad_out/train"));

  expect_error(
      run_tokenize("--input " + inputs_[0] + out + " --val-fraction 0 --tokenizer " + inputs_[1],
                   dir_),
      "'" + inputs_[1] + "' is not a SentencePiece model: its bytes do not parse");
  expect_error(run_tokenize("--input " + inputs_[0] + out + " --bogus 3", dir_),
               "unknown option '--bogus'");
  expect_error(run_tokenize("--input " + inputs_[0], dir_), "--out DIR is required");
  expect_error(run_tokenize(out, dir_), "no input files");
  expect_error(
      run_tokenize("--input " + inputs_[0] + out + " --vocab-size 300 --tokenizer x.model", dir_),
      "--vocab-size and --tokenizer exclude each other");
  expect_error(run_tokenize("--input " + inputs_[0] + out + " --val-fraction 1.5", dir_),
               "--val-fraction must be in");
  expect_error(run_tokenize("--input " + inputs_[0] + out + " --threads two", dir_),
               "--threads must be a number, got 'two'");
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A run that must succeed; its stderr explains a failure.
void expect_success(const RunResult& run) { ASSERT_EQ(run.status, 0) << run.err; }

// Two tokenize outputs hold the same corpus: the same tokenizer.model bytes, the same shard files
// under train/ and val/, each with the same tokens and attributes. (Shard bytes also hold HDF5's
// object modification times, so two runs a second apart differ there and only there.)
void expect_same_corpus(const std::string& a, const std::string& b) {
  EXPECT_EQ(slurp(a + "/tokenizer.model"), slurp(b + "/tokenizer.model"));
  for (const char* split : {"train", "val"}) {
    SCOPED_TRACE(split);
    ASSERT_EQ(fs::exists(a + "/" + split), fs::exists(b + "/" + split));
    if (!fs::exists(a + "/" + split)) continue;
    const std::vector<std::string> files_a = resolve_shard_files(a + "/" + split);
    const std::vector<std::string> files_b = resolve_shard_files(b + "/" + split);
    ASSERT_EQ(files_a.size(), files_b.size());
    for (std::size_t i = 0; i < files_a.size(); ++i) {
      EXPECT_EQ(fs::path(files_a[i]).filename(), fs::path(files_b[i]).filename());
      EXPECT_EQ(TokenSource::open(files_a[i]).info(), TokenSource::open(files_b[i]).info());
      EXPECT_EQ(read_split(files_a[i]), read_split(files_b[i])) << files_a[i];
    }
  }
}

TEST_F(TokenizeTool, CompressedAndMixedInputsGiveTheSameCorpus) {
  const std::string options = " --vocab-size 400 --threads 2 --val-fraction 0.2 --shard-tokens 700";
  const std::string plain = dir_ / "plain";
  expect_success(run_tokenize(input_args() + " --out " + plain + options, dir_));

  // Every other input compressed, gzip and zstd in turn, the .jsonl one as .jsonl.zst; the gzip
  // ones in two members.
  std::string mixed_args = "--input";
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const std::string text = slurp(inputs_[i]);
    std::string name = inputs_[i];
    if (i % 2 == 1 || i + 1 == inputs_.size()) {
      name += i % 4 == 1 ? ".gz" : ".zst";
      write_file(name, i % 4 == 1 ? gzip_member(text.substr(0, 100)) + gzip_member(text.substr(100))
                                  : zstd_frame(text));
    }
    mixed_args += " " + name;
  }
  const std::string mixed = dir_ / "mixed";
  const RunResult run = run_tokenize(mixed_args + " --out " + mixed + options, dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("11 documents"), std::string::npos) << run.out;
  expect_same_corpus(plain, mixed);
}

TEST_F(TokenizeTool, JsonlAndJsonlGzGiveTheSameShards) {
  const std::string jsonl = inputs_.back();
  write_file(jsonl + ".gz", gzip_member(slurp(jsonl)));
  const std::string options = " --vocab-size 320 --threads 2 --val-fraction 0.3";
  expect_success(run_tokenize("--input " + jsonl + " --out " + (dir_ / "j") + options, dir_));
  const RunResult gz =
      run_tokenize("--input " + jsonl + ".gz --out " + (dir_ / "gz") + options, dir_);
  ASSERT_EQ(gz.status, 0) << gz.err;
  expect_same_corpus(dir_ / "j", dir_ / "gz");
  EXPECT_TRUE(fs::exists(dir_ / "gz/val/shard_00000.h5"));
}

TEST_F(TokenizeTool, TextFieldPicksTheMemberThatHoldsTheDocument) {
  // more.jsonl's documents, moved to {"meta": {"content": ...}} beside a decoy "text".
  const std::vector<std::string> texts = read_documents(inputs_.back());
  std::string nested;
  for (const std::string& text : texts) {
    nested += "{\"text\": \"decoy\", \"meta\": {\"content\": \"" + json_escape(text) + "\"}}\n";
  }
  const std::string nested_path = dir_ / "nested.jsonl.zst";
  write_file(nested_path, zstd_frame(nested));
  const std::string options = " --vocab-size 320 --threads 1 --val-fraction 0";
  expect_success(
      run_tokenize("--input " + inputs_.back() + " --out " + (dir_ / "t") + options, dir_));
  const RunResult run = run_tokenize(
      "--input " + nested_path + " --out " + (dir_ / "n") + options + " --text-field meta.content",
      dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  expect_same_corpus(dir_ / "t", dir_ / "n");

  write_file(dir_ / "partial.jsonl", nested.substr(0, nested.find('\n') + 1) + "{\"meta\": {}}\n");
  expect_error(
      run_tokenize("--input " + (dir_ / "partial.jsonl") + " --out " + (dir_ / "p") +
                       " --text-field meta.content",
                   dir_),
      dir_ / "partial.jsonl" + ":2: column 1: object has no string field \"meta.content\"");
  expect_error(
      run_tokenize("--input " + nested_path + " --out " + (dir_ / "p") + " --text-field meta",
                   dir_),
      nested_path + ":1: column 27: field \"meta\" is not a string");
}

TEST_F(TokenizeTool, ADirectoryStandsForItsFilesInNameOrder) {
  const std::string folder = dir_ / "folder";
  fs::create_directories(folder + "/sub");
  for (const std::string& input : inputs_)
    fs::copy_file(input, folder + "/" + fs::path(input).filename().string());
  write_file(folder + "/.hidden.txt", "caf\xE9");             // not read: invalid UTF-8 would fail
  write_file(folder + "/sub/deeper.txt", "not read either");  // subdirectories are not read
  const std::string options = " --vocab-size 400 --threads 2 --val-fraction 0.2";
  expect_success(run_tokenize(input_args() + " --out " + (dir_ / "listed") + options, dir_));
  const RunResult run =
      run_tokenize("--input " + folder + " --out " + (dir_ / "folder_out") + options, dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  expect_same_corpus(dir_ / "listed", dir_ / "folder_out");
  fs::create_directories(dir_ / "empty_folder");
  expect_error(run_tokenize("--input " + (dir_ / "empty_folder") + " --out " + (dir_ / "e"), dir_),
               "input directory '" + (dir_ / "empty_folder") + "' holds no files");
}

// A corpus over --sample-mb trains on a sample: deterministic, and another tokenizer than the
// whole corpus gives; a corpus under it trains on everything, as without a cap.
TEST_F(TokenizeTool, TheTokenizerTrainsOnABoundedDeterministicSample) {
  const std::string options = input_args() + " --vocab-size 400 --threads 2 --val-fraction 0";
  expect_success(run_tokenize(options + " --out " + (dir_ / "all"), dir_));
  expect_success(run_tokenize(options + " --out " + (dir_ / "capped") + " --sample-mb 5", dir_));
  EXPECT_EQ(slurp(dir_ / "all/tokenizer.model"), slurp(dir_ / "capped/tokenizer.model"));

  const RunResult a = run_tokenize(options + " --out " + (dir_ / "a") + " --sample-mb 0.01", dir_);
  ASSERT_EQ(a.status, 0) << a.err;
  expect_success(run_tokenize(options + " --out " + (dir_ / "b") + " --sample-mb 0.01", dir_));
  EXPECT_EQ(slurp(dir_ / "a/tokenizer.model"), slurp(dir_ / "b/tokenizer.model"));
  EXPECT_NE(slurp(dir_ / "a/tokenizer.model"), slurp(dir_ / "all/tokenizer.model"));
  EXPECT_EQ(read_split(dir_ / "a/train"), read_split(dir_ / "b/train"));

  expect_error(run_tokenize(input_args() + " --out " + (dir_ / "x") +
                                " --sample-mb 1 --tokenizer " + (dir_ / "a/tokenizer.model"),
                            dir_),
               "--sample-mb and --tokenizer exclude each other");
}

TEST_F(TokenizeTool, DamagedCompressedInputStopsBeforeAnyOutput) {
  const std::string text = slurp(inputs_.back());
  const std::string gz = gzip_member(text);
  const std::string truncated = dir_ / "cut.jsonl.gz";
  write_file(truncated, gz.substr(0, gz.size() - 20));
  const std::string out = dir_ / "damaged";
  expect_error(run_tokenize(input_args() + " " + truncated + " --out " + out, dir_),
               "input file '" + truncated + "' is truncated: its gzip data end inside a member");
  EXPECT_FALSE(fs::exists(out + "/train"));
  EXPECT_FALSE(fs::exists(out + "/tokenizer.model"));

  std::string zst = zstd_frame(text, true);
  zst[zst.size() / 2] ^= 0x20;
  write_file(dir_ / "bad.txt.zst", zst);
  expect_error(run_tokenize("--input " + (dir_ / "bad.txt.zst") + " --out " + out, dir_),
               "input file '" + (dir_ / "bad.txt.zst") + "' is corrupt: zstd data error");
  EXPECT_FALSE(fs::exists(out));  // not even a staging folder
}

}  // namespace
}  // namespace strata
