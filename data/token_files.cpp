#include "data/token_files.h"

#include <bit>
#include <cstring>
#include <filesystem>

#include "model/core/error.h"

namespace strata {
namespace {

// The files' integers are little-endian and are copied, not swapped, into this host's.
static_assert(std::endian::native == std::endian::little,
              "token files are read as they lie on disk: a big-endian host would need a swap");

// llm.c's dev/data/data_common.py writes these (HEADERS_INFO), its dataloader checks them.
constexpr std::uint64_t kLlmcHeaderBytes = 256 * 4;
struct LlmcKind {
  std::int32_t magic;
  std::int32_t version;
  std::size_t token_bytes;
  const char* model;
};
constexpr LlmcKind kLlmcKinds[] = {{20240520, 1, 2, "GPT-2"}, {20240801, 7, 4, "Llama 3"}};

std::uint64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail("cannot read token file '", path, "': ", ec.message());
  return size;
}

// The first `count` int32 of the file (fewer if it is shorter).
std::vector<std::int32_t> leading_int32(const std::string& path, std::size_t count) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) fail("cannot open token file '", path, "': ", std::strerror(errno));
  std::vector<std::int32_t> values(count);
  values.resize(std::fread(values.data(), sizeof(std::int32_t), count, file.get()));
  return values;
}

}  // namespace

TokenFileFormat parse_token_file_format(const std::string& name) {
  if (name == "llmc") return TokenFileFormat::llmc;
  if (name == "raw-uint16") return TokenFileFormat::raw_uint16;
  fail(
      "--format must be llmc (llm.c's .bin with its 1024-byte header) or raw-uint16 (nanoGPT's "
      "train.bin: uint16 ids only), got '",
      name, "'");
}

TokenFileLayout inspect_token_file(const std::string& path, TokenFileFormat format) {
  const std::uint64_t size = file_bytes(path);
  TokenFileLayout layout;
  if (format == TokenFileFormat::raw_uint16) {
    if (size % 2 != 0)
      fail("token file '", path, "' has ", size,
           " bytes, not a whole number of 2-byte ids (--format raw-uint16)");
    const std::vector<std::int32_t> head = leading_int32(path, 1);
    for (const LlmcKind& kind : kLlmcKinds)
      if (!head.empty() && head[0] == kind.magic)
        fail("token file '", path, "' starts with llm.c's header (magic ", kind.magic,
             "): use --format llmc");
    layout.tokens = size / 2;
    return layout;
  }
  if (size < kLlmcHeaderBytes)
    fail("'", path, "' is not an llm.c token file: it has ", size, " bytes, less than the ",
         kLlmcHeaderBytes, "-byte header");
  const std::vector<std::int32_t> header = leading_int32(path, 3);
  if (header.size() < 3) fail("cannot read the header of token file '", path, "'");
  const LlmcKind* kind = nullptr;
  for (const LlmcKind& k : kLlmcKinds)
    if (header[0] == k.magic) kind = &k;
  if (kind == nullptr)
    fail("'", path, "' is not an llm.c token file: its header's magic is ", header[0], ", not ",
         kLlmcKinds[0].magic, " (", kLlmcKinds[0].model, ", uint16 ids) or ", kLlmcKinds[1].magic,
         " (", kLlmcKinds[1].model, ", uint32 ids)");
  if (header[1] != kind->version)
    fail("llm.c token file '", path, "' has header version ", header[1], " with magic ",
         kind->magic, ", expected ", kind->version);
  const std::uint64_t after_header = size - kLlmcHeaderBytes;
  if (header[2] < 0 || static_cast<std::uint64_t>(header[2]) * kind->token_bytes != after_header)
    fail("llm.c token file '", path, "': its header says ", header[2], " tokens (",
         static_cast<std::int64_t>(header[2]) * static_cast<std::int64_t>(kind->token_bytes),
         " bytes) but the file holds ", after_header, " bytes after the ", kLlmcHeaderBytes,
         "-byte header");
  layout.header_bytes = kLlmcHeaderBytes;
  layout.tokens = static_cast<std::uint64_t>(header[2]);
  layout.token_bytes = kind->token_bytes;
  return layout;
}

TokenFileReader::TokenFileReader(std::vector<std::string> files, TokenFileFormat format,
                                 int vocab_size)
    : files_(std::move(files)), vocab_size_(vocab_size) {
  for (const std::string& path : files_) {
    layouts_.push_back(inspect_token_file(path, format));
    total_tokens_ += layouts_.back().tokens;
  }
}

TokenFileReader::TokenFileReader(TokenFileReader&&) noexcept = default;
TokenFileReader::~TokenFileReader() = default;

void TokenFileReader::open_next_file() {
  const std::string& path = files_[file_];
  stream_.reset(std::fopen(path.c_str(), "rb"));
  if (!stream_ ||
      std::fseek(stream_.get(), static_cast<long>(layouts_[file_].header_bytes), SEEK_SET) != 0)
    fail("cannot open token file '", path, "': ", std::strerror(errno));
  read_in_file_ = 0;
}

bool TokenFileReader::next(std::vector<std::int32_t>& out, std::size_t max) {
  out.clear();
  while (out.size() < max && file_ < files_.size()) {
    if (!stream_) open_next_file();
    const TokenFileLayout& layout = layouts_[file_];
    const std::uint64_t left = layout.tokens - read_in_file_;
    if (left == 0) {
      stream_.reset();
      ++file_;
      continue;
    }
    const auto count = static_cast<std::size_t>(std::min<std::uint64_t>(left, max - out.size()));
    bytes_.resize(count * layout.token_bytes);
    if (std::fread(bytes_.data(), 1, bytes_.size(), stream_.get()) != bytes_.size())
      fail("token file '", files_[file_], "' ended early (did it change while being read?)");
    const std::size_t base = out.size();
    out.resize(base + count);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t id = 0;
      std::memcpy(&id, bytes_.data() + i * layout.token_bytes, layout.token_bytes);
      if (id >= static_cast<std::uint32_t>(vocab_size_))
        fail("token file '", files_[file_], "': id ", id, " at position ", read_in_file_ + i,
             " is outside the vocabulary [0, ", vocab_size_, ")");
      out[base + i] = static_cast<std::int32_t>(id);
    }
    read_in_file_ += count;
  }
  return !out.empty();
}

void EosDocuments::feed(std::span<const std::int32_t> ids) {
  if (ids.empty()) return;
  std::size_t begin = 0;
  if (!started_) {
    started_ = true;
    if (ids[0] == eos_id_) {  // llm.c's EOS before the first document: it closes nothing
      dropped_leading_eos_ = true;
      begin = 1;
    }
  }
  std::size_t run = begin;
  for (std::size_t i = begin; i < ids.size(); ++i) {
    if (ids[i] != eos_id_) continue;
    emit_(document_, ids.subspan(run, i + 1 - run));
    ++document_;
    run = i + 1;
    open_ = false;
  }
  if (run < ids.size()) {
    emit_(document_, ids.subspan(run));
    open_ = true;
  }
}

void EosDocuments::finish() {
  if (!open_) return;
  const std::int32_t eos[] = {eos_id_};
  emit_(document_, eos);
  ++document_;
  open_ = false;
  appended_final_eos_ = true;
}

}  // namespace strata
