// Shards are written by appending to an extendible, chunked /tokens dataset; converting the int32
// ids to the file's type here (rather than in HDF5) lets us reject out-of-range ids by position,
// and hash them as the file stores them.
#include "data/token_shards.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "model/core/error.h"

namespace strata {
namespace {

// One checksum chunk is one storage chunk: checking it is one chunk read.
static_assert(kChecksumChunkTokens == kShardChunkTokens);

std::string temporary_path(const std::string& path) { return path + ".tmp"; }

// Converts `tokens` to the file's element type, checking each id against the vocabulary.
template <class Narrow>
void narrow_tokens(std::span<const std::int32_t> tokens, const ShardInfo& info,
                   const std::string& path, std::uint64_t first_position,
                   std::vector<Narrow>& out) {
  out.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t token = tokens[i];
    if (token < 0 || token >= info.vocab_size) {
      fail("cannot write token shard '", path, "': token ", token, " at position ",
           first_position + i, " is outside the vocabulary [0, ", info.vocab_size, ")");
    }
    out[i] = static_cast<Narrow>(token);
  }
}

ShardInfo read_shard_info(hid_t file) {
  ShardInfo info;
  const std::int64_t vocab_size = read_attribute_i64(file, "vocab_size");
  const std::int64_t eos_id = read_attribute_i64(file, "eos_id");
  if (vocab_size <= 0 || vocab_size > (std::int64_t{1} << 31) - 1) {
    fail("attribute vocab_size is ", vocab_size);
  }
  if (eos_id < 0 || eos_id >= vocab_size) {
    fail("attribute eos_id ", eos_id, " is outside [0, ", vocab_size, ")");
  }
  info.vocab_size = static_cast<int>(vocab_size);
  info.eos_id = static_cast<int>(eos_id);
  info.tokenizer_sha256 = read_attribute_string(file, "tokenizer_sha256");
  return info;
}

}  // namespace

TokenShardWriter::TokenShardWriter(std::string path, ShardInfo info)
    : path_(std::move(path)), info_(std::move(info)) {
  if (info_.vocab_size <= 0) fail("cannot write token shard '", path_, "': vocab_size must be > 0");
  if (info_.eos_id < 0 || info_.eos_id >= info_.vocab_size) {
    fail("cannot write token shard '", path_, "': eos_id ", info_.eos_id, " is outside [0, ",
         info_.vocab_size, ")");
  }
  file_ = std::make_unique<H5File>(H5File::create(temporary_path(path_)));
  const std::uint64_t dims[] = {0};
  const std::uint64_t chunk[] = {kShardChunkTokens};
  const hid_t type = info_.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
  checksums_.emplace(kChecksumChunkTokens, info_.vocab_size <= 65536 ? 2 : 4);
  try {
    tokens_ = create_dataset(file_->id(), "tokens", type, dims, chunk, /*extendible=*/true);
  } catch (const Error&) {
    file_.reset();  // the destructor will not run for a constructor that throws
    std::error_code ignored;
    std::filesystem::remove(temporary_path(path_), ignored);
    throw;
  }
}

TokenShardWriter::~TokenShardWriter() {
  if (file_ == nullptr) return;
  tokens_.reset();
  file_.reset();
  std::error_code ignored;
  std::filesystem::remove(temporary_path(path_), ignored);
}

void TokenShardWriter::append(std::span<const std::int32_t> tokens) {
  STRATA_CHECK(file_ != nullptr, "append to a finished shard ", path_);
  if (tokens.empty()) return;
  const std::uint64_t offset[] = {size_};
  const std::uint64_t count[] = {tokens.size()};
  const std::uint64_t new_size[] = {size_ + tokens.size()};
  set_dataset_extent(tokens_.get(), new_size);
  if (info_.vocab_size <= 65536) {
    narrow_tokens(tokens, info_, path_, size_, narrow_);
    write_dataset_slab<std::uint16_t>(tokens_.get(), offset, count, narrow_.data());
    checksums_->add(narrow_.data(), tokens.size());
  } else {
    narrow_tokens(tokens, info_, path_, size_, wide_);
    write_dataset_slab<std::uint32_t>(tokens_.get(), offset, count, wide_.data());
    checksums_->add(wide_.data(), tokens.size());
  }
  size_ += tokens.size();
}

void TokenShardWriter::finish() {
  STRATA_CHECK(file_ != nullptr, "shard finished twice: ", path_);
  write_shard_checksums(file_->id(), checksums_->finish(), kChecksumChunkTokens);
  write_attribute_i64(file_->id(), "vocab_size", info_.vocab_size);
  write_attribute_i64(file_->id(), "eos_id", info_.eos_id);
  write_attribute_string(file_->id(), "tokenizer_sha256", info_.tokenizer_sha256);
  tokens_.reset();
  file_->close();
  std::error_code ec;
  std::filesystem::rename(temporary_path(path_), path_, ec);
  if (ec) fail("cannot rename '", temporary_path(path_), "' to '", path_, "': ", ec.message());
  file_.reset();
}

void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens,
                       const ShardInfo& info) {
  TokenShardWriter writer(path, info);
  // Blocks bound the conversion buffer for very large spans.
  constexpr std::size_t kBlock = std::size_t{1} << 22;
  for (std::size_t begin = 0; begin < tokens.size(); begin += kBlock) {
    writer.append(tokens.subspan(begin, std::min(kBlock, tokens.size() - begin)));
  }
  writer.finish();
}

std::vector<std::string> resolve_shard_files(const std::string& spec) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    for (const auto& entry : fs::directory_iterator(spec, ec)) {
      if (entry.path().extension() == ".h5" && entry.is_regular_file(ec)) {
        files.push_back(entry.path().string());
      }
    }
    if (ec) fail("cannot list directory '", spec, "': ", ec.message());
    if (files.empty()) fail("no *.h5 token shards in directory '", spec, "'");
  } else if (fs::exists(spec, ec)) {
    files.push_back(spec);
  } else if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t matches{};
    const int status = glob(spec.c_str(), 0, nullptr, &matches);
    for (std::size_t i = 0; status == 0 && i < matches.gl_pathc; ++i) {
      if (fs::is_regular_file(matches.gl_pathv[i], ec)) files.emplace_back(matches.gl_pathv[i]);
    }
    globfree(&matches);
    if (files.empty()) fail("no token shard files match '", spec, "'");
  } else {
    fail("no such file or directory: '", spec, "'");
  }
  std::sort(files.begin(), files.end());  // byte order: independent of the locale
  return files;
}

TokenSource TokenSource::open(const std::string& spec) {
  TokenSource source;
  source.files_ = resolve_shard_files(spec);
  for (const std::string& path : source.files_) {
    H5File file = H5File::open_read(path);
    ShardInfo info;
    H5Id tokens;
    std::uint64_t count = 0;
    std::size_t token_bytes = 0;
    std::optional<ShardChecksums> checksums;
    try {
      tokens = open_dataset(file.id(), "tokens");
      const std::vector<std::uint64_t> dims = dataset_dims(tokens.get());
      if (dims.size() != 1) fail("/tokens has ", dims.size(), " dimensions, expected 1");
      if (dataset_type_class(tokens.get()) != H5T_INTEGER) fail("/tokens is not integer-typed");
      token_bytes = dataset_element_bytes(tokens.get());
      if (token_bytes == 0 || token_bytes > 8)
        fail("/tokens has integers of ", token_bytes, " bytes");
      check_chunk_bytes(tokens.get(), kMaxShardChunkBytes);
      check_dataset_stored(tokens.get());
      count = dims[0];
      info = read_shard_info(file.id());
      checksums = read_shard_checksums(file.id(), count, token_bytes);
    } catch (const Error& e) {
      fail("'", path, "' is not a valid token shard: ", e.what());
    }
    if (source.shards_.empty()) {
      source.info_ = info;
    } else if (!(info == source.info_)) {
      const ShardInfo& first = source.info_;
      fail("token shards of '", spec, "' disagree: '", source.files_.front(), "' has vocab_size ",
           first.vocab_size, ", eos_id ", first.eos_id, ", tokenizer_sha256 ",
           first.tokenizer_sha256, " but '", path, "' has vocab_size ", info.vocab_size,
           ", eos_id ", info.eos_id, ", tokenizer_sha256 ", info.tokenizer_sha256);
    }
    Shard shard{std::move(file), std::move(tokens), count, token_bytes, std::move(checksums), {}};
    if (shard.checksums)
      shard.checked = std::make_unique<std::atomic<bool>[]>(shard.checksums->values.size());
    source.shards_.push_back(std::move(shard));
    source.offsets_.push_back(source.offsets_.back() + count);
  }
  return source;
}

void TokenSource::read(std::uint64_t start, std::size_t count, std::int32_t* out) const {
  if (start > size() || count > size() - start) {
    fail("token range [", start, ", ", start + count, ") is outside the split of ", size(),
         " tokens (", files_.front(), (files_.size() > 1 ? ", ..." : ""), ")");
  }
  // The shard holding `start`: the last k with offsets_[k] <= start (skips empty shards).
  std::size_t shard =
      static_cast<std::size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), start) -
                               offsets_.begin()) -
      1;
  std::size_t done = 0;
  while (done < count) {
    const std::uint64_t position = start + done;
    while (offsets_[shard + 1] <= position) ++shard;
    const std::uint64_t local = position - offsets_[shard];
    const std::size_t take = static_cast<std::size_t>(
        std::min<std::uint64_t>(count - done, offsets_[shard + 1] - position));
    if (const Shard& s = shards_[shard]; s.checksums) {
      const std::uint64_t per_chunk = s.checksums->chunk_tokens;
      for (std::uint64_t chunk = local / per_chunk; chunk <= (local + take - 1) / per_chunk;
           ++chunk)
        if (!s.checked[chunk].load(std::memory_order_relaxed)) check_chunk(shard, chunk);
    }
    const std::uint64_t offset[] = {local};
    const std::uint64_t extent[] = {take};
    read_dataset_slab<std::int32_t>(shards_[shard].tokens.get(), offset, extent, out + done);
    for (std::size_t i = 0; i < take; ++i) {
      const std::int32_t token = out[done + i];
      if (token < 0 || token >= info_.vocab_size) {
        fail("corrupt token shard '", files_[shard], "': token ", token, " at position ", local + i,
             " is outside the vocabulary [0, ", info_.vocab_size, ")");
      }
    }
    done += take;
  }
}

std::uint64_t TokenSource::chunk_tokens(const Shard& shard) const {
  return shard.checksums ? shard.checksums->chunk_tokens : kShardChunkTokens;
}

std::uint64_t TokenSource::chunk_count(std::size_t shard) const {
  const std::uint64_t per_chunk = chunk_tokens(shards_.at(shard));
  return (shards_[shard].size + per_chunk - 1) / per_chunk;
}

void TokenSource::check_chunk(std::size_t shard_index, std::uint64_t chunk) const {
  const Shard& shard = shards_.at(shard_index);
  const std::uint64_t per_chunk = chunk_tokens(shard);
  STRATA_CHECK(chunk < chunk_count(shard_index), "chunk ", chunk, " of ", files_[shard_index]);
  const std::uint64_t first = chunk * per_chunk;
  const std::uint64_t count = std::min(per_chunk, shard.size - first);
  const std::string& path = files_[shard_index];
  // Read as stored (2 or 4 bytes per id where there are checksums): the checksum is of those bytes.
  const auto check = [&]<class Id>(std::vector<Id>& ids) {
    ids.resize(static_cast<std::size_t>(count));
    const std::uint64_t offset[] = {first};
    const std::uint64_t extent[] = {count};
    read_dataset_slab<Id>(shard.tokens.get(), offset, extent, ids.data());
    if (shard.checksums) {
      const std::uint64_t stored = shard.checksums->values[chunk];
      const std::uint64_t computed = token_chunk_checksum(ids.data(), ids.size(), sizeof(Id));
      if (computed != stored)
        fail("corrupt token shard '", path, "': chunk ", chunk, " (tokens ", first, " to ",
             first + count - 1, ") fails its checksum (XXH3-64 ", checksum_hex(computed),
             ", stored ", checksum_hex(stored),
             "): its ids changed after they were written; tokenize the corpus again");
    }
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (const std::int64_t id = static_cast<std::int64_t>(ids[i]);
          id < 0 || id >= info_.vocab_size)
        fail("corrupt token shard '", path, "': token ", ids[i], " at position ", first + i,
             " is outside the vocabulary [0, ", info_.vocab_size, ")");
  };
  if (shard.token_bytes == 2) {
    std::vector<std::uint16_t> ids;
    check(ids);
  } else if (shard.token_bytes == 4) {
    std::vector<std::uint32_t> ids;
    check(ids);
  } else {  // no checksums (read_shard_checksums refuses other widths): the range check alone
    std::vector<std::int64_t> ids;
    check(ids);
  }
  if (shard.checksums) shard.checked[chunk].store(true, std::memory_order_relaxed);
}

std::size_t TokenSource::files_without_checksums() const {
  return static_cast<std::size_t>(
      std::ranges::count_if(shards_, [](const Shard& s) { return !s.checksums; }));
}

void check_shards_tokenizer(const TokenSource& shards, const std::string& tokenizer_sha256,
                            const std::string& what) {
  const std::string& made_with = shards.info().tokenizer_sha256;
  if (made_with.empty() || tokenizer_sha256.empty() || made_with == tokenizer_sha256) return;
  if (made_with == kNoTokenizer)
    fail(what, ": the shards ('", shards.files().front(), "'...) hold ids converted without a ",
         "tokenizer (tokenizer_sha256 \"none\"), not ids of the tokenizer with sha256 ",
         tokenizer_sha256.substr(0, 12), "...");
  if (tokenizer_sha256 == kNoTokenizer)
    fail(what, ": the shards ('", shards.files().front(), "'...) were made with a tokenizer ",
         "(sha256 ", made_with.substr(0, 12), "...), but the run's ids were converted without one");
  fail(what, ": the shards ('", shards.files().front(), "'...) were made with another tokenizer ",
       "(sha256 ", made_with.substr(0, 12), "..., not ", tokenizer_sha256.substr(0, 12), "...)");
}

std::string missing_checksums_note(
    const std::vector<std::pair<std::string, const TokenSource*>>& splits) {
  std::size_t files = 0;
  std::string keys;
  for (const auto& [key, split] : splits) {
    const std::size_t unchecked = split->files_without_checksums();
    if (unchecked == 0) continue;
    files += unchecked;
    keys += (keys.empty() ? "" : ", ") + key;
  }
  if (files == 0) return "";
  return "note: " + std::to_string(files) + (files == 1 ? " token shard" : " token shards") +
         " of " + keys +
         " without checksums (written before tokenize stored them): ids altered within the "
         "vocabulary would go unnoticed; tokenize the corpus again to add them";
}

}  // namespace strata
