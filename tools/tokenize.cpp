// tokenize --input FILE|DIR... --out DIR [--vocab-size N | --tokenizer MODEL] [--val-fraction F]
//          [--split file|paragraphs|lines] [--text-field NAME] [--sample-mb M] [--threads N]
//          [--shard-tokens N] [--force]
// tokenize --from-tokens FILE|DIR... --format llmc|raw-uint16 --vocab-size N --eos-id ID --out DIR
//          [--val-fraction F] [--shard-tokens N] [--force]      (tools/tokenize_from_tokens.cpp)
// tokenize --verify DIR                                         (tools/tokenize_verify.cpp)
//
// Turns text into token shards (docs/ARCHITECTURE.md §4, §5). Inputs are read as streams
// (data/documents.h): plain text = one document, or one per paragraph or line with --split;
// .jsonl = one per line, the string at --text-field (default "text", a dotted path reaches nested
// objects); a .gz or .zst suffix on either is decompressed on the fly. A directory stands for its
// files (not those of its subdirectories, nor hidden ones) in name order. Then it trains a BPE
// tokenizer (or loads --tokenizer), holds out whole documents for validation (data/split.h),
// encodes every document with N threads and writes, in input order, each document's ids
// followed by EOS:
//   DIR/tokenizer.model   the model used (a copy of --tokenizer, or the trained one)
//   DIR/train/shard_00000.h5 ...   at most --shard-tokens tokens per shard
//   DIR/val/shard_00000.h5 ...     absent when --val-fraction is 0
//
// Memory does not grow with the corpus: no document is held longer than it takes to encode it.
// Pass 1 reads every input once, checking it whole (so a bad line 10 GB in stops the run before
// any output), counting the documents (the validation split needs the count) and collecting the
// tokenizer's training text: every sentence while they fit in --sample-mb (default 256 MB), a
// deterministic uniform sample of them beyond (data/training_sample.h); a corpus under the cap
// trains exactly the tokenizer that training on all of it gives. Pass 2 reads the inputs again
// and encodes them through the ordered encoder (data/ordered_encoder.h), which holds at most
// 256 MB of text in flight. Pass 2 checks that it sees the documents pass 1 counted.
//
// Everything is first written under DIR/.tokenize-staging-<pid>/ and moved into place only when
// complete, so an interrupted or failed run never leaves half-written output under those names. A
// DIR that already holds a corpus (any of those names) is refused unless --force: replacing one is
// never silent. A corpus whose --val-fraction holds out no document (a single document) is an
// error that says how to split it, or to ask for no validation set with --val-fraction 0.
// Progress goes to stderr (on a terminal: phase notes and a live line; otherwise only a plain line
// every 10 s of reading or encoding); one summary line goes to stdout. Errors: one `error: ...`
// line on stderr and exit status 1.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/documents.h"
#include "data/ordered_encoder.h"
#include "data/shard_set_writer.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "data/training_sample.h"
#include "model/core/command_line.h"
#include "model/core/error.h"
#include "tools/tokenize_modes.h"
#include "tools/tokenize_output.h"
#include "train/metrics/progress_bar.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The help (model/core/command_line.h); the parser below is tokenize's own, as --input and
// --from-tokens take several values. Errors quote the usage line alone.
const CommandSpec kCommand{
    "usage: tokenize --input FILE|DIR... --out DIR [--vocab-size N | --tokenizer MODEL] "
    "[--val-fraction F] [--split file|paragraphs|lines] [--text-field NAME] [--sample-mb M] "
    "[--threads N] [--shard-tokens N] [--force]",
    "Text corpora to token shards (docs/ARCHITECTURE.md §5): trains a SentencePiece tokenizer "
    "on the corpus (or loads --tokenizer), splits whole documents into train/ and val/, and writes "
    "HDF5 shards with a checksum per chunk into --out, with tokenizer.model. Also: `tokenize "
    "--from-tokens FILE|DIR... --format llmc|raw-uint16 --vocab-size N --eos-id ID --out DIR "
    "[--val-fraction F] [--shard-tokens N] [--force]` converts llm.c's and nanoGPT's token "
    "files; `tokenize --verify DIR` checks every shard of DIR against its checksums and "
    "vocabulary (exit status 1 if any fails).",
    {{"--input", "FILE|DIR...", "",
      ".jsonl (a JSON object a line, its --text-field string a document), any other name plain "
      "text; .gz and .zst decompressed; a directory stands for its files in name order"},
     {"--out", "DIR", "",
      "where the corpus goes (train/, val/, tokenizer.model); required except with --verify"},
     {"--vocab-size", "N", "4096", "the vocabulary of the tokenizer trained (or of --from-tokens)"},
     {"--tokenizer", "MODEL", "", "encode with this SentencePiece model instead of training one"},
     {"--val-fraction", "F", "0.05", "of the documents go to val/, in [0, 0.99]"},
     {"--split", "file|paragraphs|lines", "file",
      "a plain text file is one document, or one per paragraph or line"},
     {"--text-field", "NAME", "text",
      "the .jsonl field holding the text; a dotted path (meta.content) reaches nested objects"},
     {"--sample-mb", "M", "256",
      "the tokenizer trains on every line while they fit in M MB, on a deterministic uniform "
      "sample beyond"},
     {"--threads", "N", "", "threads that train the tokenizer and encode documents", "the cores"},
     {"--shard-tokens", "N", "100000000", "tokens a shard holds at most"},
     {"--force", "", "", "replace a corpus already in --out"},
     {"--from-tokens", "FILE|DIR...", "",
      "shards from llm.c's or nanoGPT's token files instead of text; documents are cut at "
      "--eos-id (an EOS before each document, llm.c's, moves after it); no tokenizer"},
     {"--format", "llmc|raw-uint16", "",
      "with --from-tokens: llmc (llm.c's .bin: 1024-byte header, uint16 or uint32 ids) or "
      "raw-uint16 (nanoGPT's train.bin: uint16 ids only)"},
     {"--eos-id", "ID", "",
      "with --from-tokens: the id that ends documents (GPT-2's <|endoftext|>: 50256)"},
     {"--verify", "DIR", "",
      "check every shard of DIR (its train/ and val/, or a split) against its checksums and "
      "vocabulary"}}};
const std::string& kUsage = kCommand.usage;

struct Options {
  std::vector<std::string> inputs;
  std::string out;
  int vocab_size = 4096;
  bool vocab_size_given = false;
  std::string tokenizer;
  double val_fraction = 0.05;
  TextSplit split = TextSplit::file;
  std::string text_field = "text";
  std::uint64_t sample_bytes = kDefaultTrainingSampleBytes;
  bool sample_bytes_given = false;
  bool force = false;  // replace a corpus already in --out
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::uint64_t shard_tokens = 100'000'000;
  std::vector<std::string> from_tokens;  // --from-tokens mode (tools/tokenize_modes.h)
  std::string format;
  int eos_id = -1;
  std::string verify;           // --verify mode
  std::set<std::string> given;  // every flag on the command line, for the modes' exclusions
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

// The flags of --verify and --from-tokens (tools/tokenize_modes.h) against the rest.
void check_modes(const Options& options) {
  const auto refuse = [&](const char* mode, std::initializer_list<const char*> flags) {
    for (const char* flag : flags)
      if (options.given.contains(flag)) fail(flag, " does not go with ", mode);
  };
  if (!options.verify.empty()) {
    if (options.given.size() > 1) fail("--verify DIR takes no other option");
  } else if (!options.from_tokens.empty()) {
    refuse("--from-tokens (ids need no tokenizer)",
           {"--input", "--tokenizer", "--split", "--text-field", "--sample-mb", "--threads"});
    for (const char* flag : {"--format", "--vocab-size", "--eos-id", "--out"})
      if (!options.given.contains(flag)) fail("--from-tokens needs ", flag);
  } else {
    refuse("--input: they are for --from-tokens", {"--format", "--eos-id"});
  }
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
    options.given.insert(flag);
    const auto value = [&]() -> std::string {
      if (has_inline_value) return inline_value;
      if (i + 1 >= argc || std::string(argv[i + 1]).starts_with("--")) {
        fail("option ", flag, " needs a value (", kUsage, ")");
      }
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << help_text(kCommand) << std::flush;
      std::exit(0);
    } else if (flag == "--input" || flag == "--from-tokens") {
      std::vector<std::string>& files = flag == "--input" ? options.inputs : options.from_tokens;
      if (has_inline_value) files.push_back(inline_value);
      while (i + 1 < argc && !std::string(argv[i + 1]).starts_with("--")) {
        files.emplace_back(argv[++i]);
      }
      if (!has_inline_value && files.empty()) fail("option ", flag, " needs a file");
    } else if (flag == "--format") {
      options.format = value();
    } else if (flag == "--eos-id") {
      options.eos_id = parse_number<int>(flag, value(), 0, (1 << 30) - 1);
    } else if (flag == "--verify") {
      options.verify = value();
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
    } else if (flag == "--text-field") {
      options.text_field = value();
      if (options.text_field.empty()) fail("--text-field needs a name, got ''");
    } else if (flag == "--sample-mb") {
      options.sample_bytes =
          static_cast<std::uint64_t>(parse_number<double>(flag, value(), 0.001, 1e6) * 1e6);
      options.sample_bytes_given = true;
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
  check_modes(options);
  if (!options.verify.empty() || !options.from_tokens.empty()) return options;
  if (options.inputs.empty()) fail("no input files: --input FILE... is required (", kUsage, ")");
  if (options.out.empty()) fail("--out DIR is required (", kUsage, ")");
  if (options.vocab_size_given && !options.tokenizer.empty()) {
    fail("--vocab-size and --tokenizer exclude each other: a loaded tokenizer has its own size");
  }
  if (options.sample_bytes_given && !options.tokenizer.empty()) {
    fail("--sample-mb and --tokenizer exclude each other: a loaded tokenizer is not trained");
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

// On a terminal: one line redrawn in place. Otherwise (CI logs): a plain line every 10 s at most,
// and none for the end of a phase (the summary line says how it ended).
class ProgressLine {
 public:
  ProgressLine() : terminal_(isatty(STDERR_FILENO) != 0), start_(Clock::now()), last_(start_) {}
  ~ProgressLine() { finish(); }  // so an error message starts on its own line

  // "<phase>: N[/TOTAL] documents, X/Y MB[ what] (P%), R MB/s" with `done` of `total` bytes.
  void update(const char* phase, std::size_t documents, std::size_t documents_total,
              std::uint64_t done, std::uint64_t total, const char* what, bool complete) {
    const auto now = Clock::now();
    const auto interval = terminal_ ? std::chrono::milliseconds(100) : std::chrono::seconds(10);
    if (now - last_ < interval && !complete) return;
    if (!terminal_ && complete) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double percent =
        total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total);
    char count[48];
    if (documents_total > 0)
      std::snprintf(count, sizeof(count), "%zu/%zu", documents, documents_total);
    else
      std::snprintf(count, sizeof(count), "%zu", documents);
    char text[200];
    std::snprintf(text, sizeof(text), "%s: %s documents, %.1f/%.1f MB%s (%.0f%%), %.1f MB/s", phase,
                  count, megabytes(done), megabytes(total), what, percent,
                  seconds > 0 ? megabytes(done) / seconds : 0.0);
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

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) fail("cannot write '", path.string(), "'");
}

std::uint64_t total_file_bytes(const std::vector<std::string>& files) {
  std::uint64_t bytes = 0;
  for (const std::string& file : files) {
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(file, ec);
    if (!ec) bytes += size;  // a missing file fails when it is read, with the reader's message
  }
  return bytes;
}

// What pass 1 learns about the corpus.
struct CorpusCount {
  std::size_t documents = 0;
  std::uint64_t text_bytes = 0;
};

// Pass 1: reads every document once, checking all input, counting, and adding each to `sample`
// when there is one.
CorpusCount read_corpus(const Options& options, const std::vector<std::string>& files,
                        TrainingSample* sample) {
  CorpusReader corpus(files, options.split, options.text_field);
  const std::uint64_t input_bytes = total_file_bytes(files);
  ProgressLine progress;
  CorpusCount count;
  std::string document;
  while (corpus.next(document)) {
    ++count.documents;
    count.text_bytes += document.size();
    if (sample != nullptr) sample->add_document(document);
    progress.update("reading", count.documents, 0, corpus.file_bytes_read(), input_bytes,
                    " of input", false);
  }
  progress.update("reading", count.documents, 0, corpus.file_bytes_read(), input_bytes, " of input",
                  true);
  return count;
}

void run(const Options& options) {
  check_output_is_free(options.out, options.force);
  const std::vector<std::string> files = list_input_files(options.inputs);

  const bool train_new = options.tokenizer.empty();
  // A given model is checked before the inputs are read: that may take long.
  std::optional<Tokenizer> loaded;
  if (!train_new) loaded.emplace(Tokenizer::load(options.tokenizer));
  std::optional<TrainingSample> sample;
  if (train_new) sample.emplace(options.sample_bytes);
  const CorpusCount corpus = read_corpus(options, files, sample ? &*sample : nullptr);
  note("tokenize: %zu documents, %.2f MB of text from %zu input %s\n", corpus.documents,
       megabytes(corpus.text_bytes), files.size(), plural(files.size(), "file", "files"));

  // Before the tokenizer's training: the split depends on the document count alone.
  const std::vector<bool> is_validation =
      choose_validation_documents(corpus.documents, options.val_fraction);
  if (options.val_fraction > 0 && std::ranges::none_of(is_validation, [](bool v) { return v; }))
    fail("--val-fraction ", options.val_fraction, " holds out no document: the corpus has ",
         corpus.documents, " ", plural(corpus.documents, "document", "documents"),
         " (a plain-text file is one); cut it with --split paragraphs or --split lines, or pass "
         "--val-fraction 0 for no validation set (then data.val must name another set, or be "
         "empty)");

  Tokenizer tokenizer = [&] {
    if (!train_new) return std::move(*loaded);
    if (sample->sampled())
      note(
          "tokenize: training a BPE tokenizer of %d tokens on a sample of %.2f MB of %.2f MB of "
          "lines (%zu of %llu)\n",
          options.vocab_size, megabytes(sample->text_bytes()), megabytes(sample->text_bytes_seen()),
          sample->sentences(), static_cast<unsigned long long>(sample->sentences_seen()));
    else
      note("tokenize: training a BPE tokenizer of %d tokens on all %.2f MB of lines\n",
           options.vocab_size, megabytes(sample->text_bytes()));
    Tokenizer trained =
        train_tokenizer(*sample, options.vocab_size, options.threads, describe_inputs(files));
    sample.reset();  // its memory goes back before encoding starts
    return trained;
  }();
  const ShardInfo info{tokenizer.vocab_size(), tokenizer.eos_id(), tokenizer.sha256()};

  StagedOutput output(options.out);
  write_bytes(output.path("tokenizer.model"), tokenizer.serialized());
  ShardSetWriter train(output.path("train").string(), info, options.shard_tokens);
  ShardSetWriter val(output.path("val").string(), info, options.shard_tokens);
  std::size_t val_documents = 0;

  // Pass 2. The source runs on one worker at a time, so its counters need no lock.
  note("tokenize: encoding with %d %s\n", options.threads,
       plural(static_cast<std::size_t>(options.threads), "thread", "threads"));
  CorpusReader reader(files, options.split, options.text_field);
  std::uint64_t text_bytes_read = 0;
  const auto next_document = [&](std::string& document) {
    if (!reader.next(document)) return false;
    text_bytes_read += document.size();
    return true;
  };
  const auto changed = [&] {
    fail("the input changed while tokenize read it: the first pass found ", corpus.documents,
         " documents and ", corpus.text_bytes, " bytes of text, the second one more or other");
  };
  ProgressLine progress;
  const auto start = Clock::now();
  const std::size_t encoded = encode_in_order(
      tokenizer, next_document, options.threads,
      [&](std::size_t index, std::vector<int>& ids) {
        if (index >= corpus.documents) changed();
        ids.push_back(info.eos_id);
        ShardSetWriter& split = is_validation[index] ? val : train;
        val_documents += is_validation[index] ? 1 : 0;
        split.append(std::span<const std::int32_t>(ids.data(), ids.size()));
      },
      [&](const EncodeProgress& status) {
        progress.update("encoding", status.documents_done, corpus.documents, status.bytes_done,
                        corpus.text_bytes, "", status.documents_done == corpus.documents);
      });
  if (encoded != corpus.documents || text_bytes_read != corpus.text_bytes) changed();
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
      corpus.documents, corpus.documents - val_documents, val_documents, info.vocab_size,
      static_cast<unsigned long long>(train.tokens()), train.shards(),
      plural(train.shards(), "shard", "shards"), static_cast<unsigned long long>(val.tokens()),
      val.shards(), plural(val.shards(), "shard", "shards"), megabytes(corpus.text_bytes), seconds,
      seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0,
      seconds > 0 ? megabytes(corpus.text_bytes) / seconds : 0.0, options.out.c_str());
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  try {
    const strata::Options options = strata::parse_options(argc, argv);
    if (!options.verify.empty()) return strata::verify_shards(options.verify);
    if (!options.from_tokens.empty())
      strata::convert_token_files(
          {options.from_tokens, strata::parse_token_file_format(options.format), options.vocab_size,
           options.eos_id, options.out, options.val_fraction, options.shard_tokens, options.force});
    else
      strata::run(options);
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
