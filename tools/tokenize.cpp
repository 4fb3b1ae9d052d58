// tokenize --input FILE... --out DIR [--vocab-size N | --tokenizer MODEL] [--val-fraction F]
//          [--split file|paragraphs|lines] [--threads N] [--shard-tokens N] [--force]
//
// Turns text into token shards (DESIGN §4, §5): reads the documents of every input (plain text =
// one document, or one per paragraph or line with --split; .jsonl = one per line), trains a BPE
// tokenizer on them (or loads --tokenizer), holds out whole documents for validation
// (data/split.h), encodes every document with N threads and writes, in input order, each document's
// ids followed by EOS:
//   DIR/tokenizer.model   the model used (a copy of --tokenizer, or the trained one)
//   DIR/train/shard_00000.h5 ...   at most --shard-tokens tokens per shard
//   DIR/val/shard_00000.h5 ...     absent when --val-fraction is 0
// Everything is first written under DIR/.tokenize-staging-<pid>/ and moved into place only when
// complete, so an interrupted or failed run never leaves half-written output under those names. A
// DIR that already holds a corpus (any of those names) is refused unless --force: replacing one is
// never silent. A corpus whose --val-fraction holds out no document (a single document) is an
// error that says how to split it, or to ask for no validation set with --val-fraction 0.
// Progress goes to stderr (on a terminal: phase notes and a live line; otherwise only a plain line
// every 10 s of encoding); one summary line goes to stdout. Errors: one `error: ...` line on stderr
// and exit status 1.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "data/documents.h"
#include "data/ordered_encoder.h"
#include "data/shard_set_writer.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "model/core/error.h"
#include "train/progress_bar.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: tokenize --input FILE... --out DIR [--vocab-size N | --tokenizer MODEL] "
    "[--val-fraction F] [--split file|paragraphs|lines] [--threads N] [--shard-tokens N] "
    "[--force]";

struct Options {
  std::vector<std::string> inputs;
  std::string out;
  int vocab_size = 4096;
  bool vocab_size_given = false;
  std::string tokenizer;
  double val_fraction = 0.05;
  TextSplit split = TextSplit::file;
  bool force = false;  // replace a corpus already in --out
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::uint64_t shard_tokens = 100'000'000;
};

template <class T>
T parse_number(const std::string& flag, const std::string& text, T min, T max) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    fail(flag, " must be a number, got '", text, "'");
  }
  if (value < min || value > max) fail(flag, " must be in [", min, ", ", max, "], got ", text);
  return value;
}

// Accepts `--flag value` and `--flag=value`; --input takes every following non-flag argument.
Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string inline_value;
    bool has_inline_value = false;
    if (const auto equals = flag.find('='); flag.starts_with("--") && equals != std::string::npos) {
      inline_value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
      has_inline_value = true;
    }
    const auto value = [&]() -> std::string {
      if (has_inline_value) return inline_value;
      if (i + 1 >= argc || std::string(argv[i + 1]).starts_with("--")) {
        fail("option ", flag, " needs a value (", kUsage, ")");
      }
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage << "\n";
      std::exit(0);
    } else if (flag == "--input") {
      if (has_inline_value) options.inputs.push_back(inline_value);
      while (i + 1 < argc && !std::string(argv[i + 1]).starts_with("--")) {
        options.inputs.emplace_back(argv[++i]);
      }
      if (!has_inline_value && options.inputs.empty()) fail("option --input needs a file");
    } else if (flag == "--out") {
      options.out = value();
    } else if (flag == "--vocab-size") {
      options.vocab_size = parse_number<int>(flag, value(), 1, 1 << 30);
      options.vocab_size_given = true;
    } else if (flag == "--tokenizer") {
      options.tokenizer = value();
    } else if (flag == "--val-fraction") {
      options.val_fraction = parse_number<double>(flag, value(), 0.0, 0.99);
    } else if (flag == "--split") {
      options.split = parse_text_split(value());
    } else if (flag == "--force") {
      if (has_inline_value) fail("--force takes no value");
      options.force = true;
    } else if (flag == "--threads") {
      options.threads = parse_number<int>(flag, value(), 1, 4096);
    } else if (flag == "--shard-tokens") {
      options.shard_tokens = parse_number<std::uint64_t>(flag, value(), 1, std::uint64_t{1} << 40);
    } else if (flag.starts_with("-")) {
      fail("unknown option '", flag, "' (", kUsage, ")");
    } else {
      fail("unexpected argument '", flag, "' (", kUsage, ")");
    }
  }
  if (options.inputs.empty()) fail("no input files: --input FILE... is required (", kUsage, ")");
  if (options.out.empty()) fail("--out DIR is required (", kUsage, ")");
  if (options.vocab_size_given && !options.tokenizer.empty()) {
    fail("--vocab-size and --tokenizer exclude each other: a loaded tokenizer has its own size");
  }
  return options;
}

// "'a.txt'" or "'a.txt', 'b.txt' and 3 more files": names the corpus in tokenizer errors.
std::string describe_inputs(const std::vector<std::string>& inputs) {
  std::string text = "'" + inputs[0] + "'";
  if (inputs.size() >= 2) text += ", '" + inputs[1] + "'";
  if (inputs.size() > 2) text += " and " + std::to_string(inputs.size() - 2) + " more files";
  return text;
}

double megabytes(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// Phase notes go to a terminal only: piped stderr (tests, CI) then holds nothing but progress
// lines of long runs and, on failure, the one `error:` line.
template <class... Args>
void note(const char* format, Args... args) {
  if (isatty(STDERR_FILENO) == 0) return;
  std::fprintf(stderr, format, args...);
}

// On a terminal: one line redrawn in place. Otherwise (CI logs): a plain line every 10 s at most.
class ProgressLine {
 public:
  ProgressLine() : terminal_(isatty(STDERR_FILENO) != 0), start_(Clock::now()), last_(start_) {}
  ~ProgressLine() { finish(); }  // so an error message starts on its own line

  void update(const EncodeProgress& progress) {
    const auto now = Clock::now();
    const auto interval = terminal_ ? std::chrono::milliseconds(100) : std::chrono::seconds(10);
    if (now - last_ < interval && progress.documents_done < progress.documents_total) return;
    if (!terminal_ && progress.documents_done == progress.documents_total) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double percent = progress.bytes_total == 0
                               ? 100.0
                               : 100.0 * static_cast<double>(progress.bytes_done) /
                                     static_cast<double>(progress.bytes_total);
    char text[160];
    std::snprintf(text, sizeof(text),
                  "encoding: %zu/%zu documents, %.1f/%.1f MB (%.0f%%), %.1f MB/s",
                  progress.documents_done, progress.documents_total, megabytes(progress.bytes_done),
                  megabytes(progress.bytes_total), percent,
                  seconds > 0 ? megabytes(progress.bytes_done) / seconds : 0.0);
    if (terminal_)
      line_.draw(text);
    else
      std::fprintf(stderr, "%s\n", text);
  }
  void finish() { line_.finish(); }

 private:
  bool terminal_;
  LiveLine line_{stderr};
  Clock::time_point start_;
  Clock::time_point last_;
};

// The staging directory: created on construction, removed on destruction unless committed.
class StagedOutput {
 public:
  explicit StagedOutput(const std::string& out) : out_(out) {
    std::error_code ec;
    fs::create_directories(out_, ec);
    if (ec || !fs::is_directory(out_)) {
      fail("cannot create output directory '", out, "': ", ec ? ec.message() : "not a directory");
    }
    staging_ = out_ / (".tokenize-staging-" + std::to_string(::getpid()));
    fs::remove_all(staging_, ec);
    fs::create_directories(staging_ / "train", ec);
    if (!ec) fs::create_directories(staging_ / "val", ec);
    if (ec) fail("cannot create '", staging_.string(), "': ", ec.message());
  }
  ~StagedOutput() {
    std::error_code ignored;
    fs::remove_all(staging_, ignored);
  }
  fs::path path(const std::string& name) const { return staging_ / name; }

  // Replaces DIR/<name> by the staged one for each name; a staged entry that is missing or an
  // empty directory (val/ with --val-fraction 0) removes the old one, so no output of an earlier
  // run is left mixed with this one.
  void commit() {
    for (const char* name : {"tokenizer.model", "train", "val"}) {
      std::error_code ec;
      fs::remove_all(out_ / name, ec);
      if (ec) fail("cannot replace '", (out_ / name).string(), "': ", ec.message());
      const fs::path staged = staging_ / name;
      if (!fs::exists(staged) || (fs::is_directory(staged) && fs::is_empty(staged))) continue;
      fs::rename(staging_ / name, out_ / name, ec);
      if (ec) fail("cannot move output into '", (out_ / name).string(), "': ", ec.message());
    }
  }

 private:
  fs::path out_;
  fs::path staging_;
};

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) fail("cannot write '", path.string(), "'");
}

const char* plural(std::size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// Before any work: a corpus already in --out is replaced only on request.
void check_output_is_free(const Options& options) {
  if (options.force) return;
  for (const char* name : {"tokenizer.model", "train", "val"}) {
    std::error_code ec;
    if (fs::exists(fs::path(options.out) / name, ec))
      fail("--out '", options.out, "' already holds a tokenized corpus ('", name,
           "'); choose another folder, or pass --force to replace it");
  }
}

void run(const Options& options) {
  check_output_is_free(options);
  std::vector<std::string> documents;
  std::uint64_t text_bytes = 0;
  for (const std::string& input : options.inputs) {
    for (std::string& document : read_documents(input, options.split)) {
      text_bytes += document.size();
      documents.push_back(std::move(document));
    }
  }
  note("tokenize: %zu documents, %.2f MB of text from %zu input %s\n", documents.size(),
       megabytes(text_bytes), options.inputs.size(),
       plural(options.inputs.size(), "file", "files"));

  // Before the tokenizer's training: the split depends on the document count alone.
  const std::vector<bool> is_validation =
      choose_validation_documents(documents.size(), options.val_fraction);
  if (options.val_fraction > 0 && std::ranges::none_of(is_validation, [](bool v) { return v; }))
    fail("--val-fraction ", options.val_fraction, " holds out no document: the corpus has ",
         documents.size(), " ", plural(documents.size(), "document", "documents"),
         " (a plain-text file is one); cut it with --split paragraphs or --split lines, or pass "
         "--val-fraction 0 for no validation set (then data.val must name another set, or be "
         "empty)");

  Tokenizer tokenizer = [&] {
    if (!options.tokenizer.empty()) return Tokenizer::load(options.tokenizer);
    note("tokenize: training a BPE tokenizer of %d tokens\n", options.vocab_size);
    return train_tokenizer(documents, options.vocab_size, options.threads,
                           describe_inputs(options.inputs));
  }();
  const ShardInfo info{tokenizer.vocab_size(), tokenizer.eos_id(), tokenizer.sha256()};

  StagedOutput output(options.out);
  write_bytes(output.path("tokenizer.model"), tokenizer.serialized());
  ShardSetWriter train(output.path("train").string(), info, options.shard_tokens);
  ShardSetWriter val(output.path("val").string(), info, options.shard_tokens);
  std::size_t val_documents = 0;

  note("tokenize: encoding with %d %s\n", options.threads,
       plural(static_cast<std::size_t>(options.threads), "thread", "threads"));
  ProgressLine progress;
  const auto start = Clock::now();
  encode_in_order(
      tokenizer, documents, options.threads,
      [&](std::size_t index, std::vector<int>& ids) {
        ids.push_back(info.eos_id);
        ShardSetWriter& split = is_validation[index] ? val : train;
        val_documents += is_validation[index] ? 1 : 0;
        split.append(std::span<const std::int32_t>(ids.data(), ids.size()));
      },
      [&](const EncodeProgress& status) { progress.update(status); });
  train.finish();
  val.finish();
  progress.finish();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  output.commit();

  const std::uint64_t tokens = train.tokens() + val.tokens();
  std::printf(
      "tokenize: %zu documents (%zu train, %zu val), vocab_size %d, train %llu tokens in %zu "
      "%s, val %llu tokens in %zu %s, %.2f MB encoded in %.2f s: %.0f tokens/s, %.2f MB/s -> "
      "%s\n",
      documents.size(), documents.size() - val_documents, val_documents, info.vocab_size,
      static_cast<unsigned long long>(train.tokens()), train.shards(),
      plural(train.shards(), "shard", "shards"), static_cast<unsigned long long>(val.tokens()),
      val.shards(), plural(val.shards(), "shard", "shards"), megabytes(text_bytes), seconds,
      seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0,
      seconds > 0 ? megabytes(text_bytes) / seconds : 0.0, options.out.c_str());
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  try {
    strata::run(strata::parse_options(argc, argv));
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
