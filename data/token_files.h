// Token files of other trainers, read for `tokenize --from-tokens` (docs/ARCHITECTURE.md §5
// "Token files"), and the cut of their stream into documents at the EOS id.
//
// Formats (every integer little-endian):
//   llmc        llm.c's .bin: a header of 256 int32 (magic, version, token count, zeros), then the
//               ids: magic 20240520 with version 1 holds uint16 ids (GPT-2), magic 20240801 with
//               version 7 uint32 ids (Llama 3). The count must match the file's size.
//   raw-uint16  nanoGPT's train.bin / val.bin: uint16 ids and nothing else.
// The files, in the order given, form one stream of ids, as a split's shards do: a document may
// run on from one file into the next (llm.c cuts its shards at exact token counts).
//
// Documents (EosDocuments): the stream is cut after every EOS id, so each document is what
// follows one EOS up to and including the next, as in Strata's shards. llm.c writes EOS *before*
// every document: the stream's leading EOS then closes an empty document, which is dropped, and
// its last document, which has no EOS after it, gets one. So the stream keeps its length and
// order, the leading EOS moving to the end. nanoGPT writes EOS *after* every document (Strata's
// own layout): nothing moves. A stream without any EOS is one document.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata {

enum class TokenFileFormat { llmc, raw_uint16 };

// "llmc" or "raw-uint16"; strata::Error naming both otherwise.
TokenFileFormat parse_token_file_format(const std::string& name);

// Where a token file's ids are, from its header and size.
struct TokenFileLayout {
  std::uint64_t header_bytes = 0;
  std::uint64_t tokens = 0;
  std::size_t token_bytes = 2;
};

// strata::Error naming the file when it cannot be read, its size is not a whole number of ids, or
// (llmc) its header has another magic or version, or a token count other than its size holds.
TokenFileLayout inspect_token_file(const std::string& path, TokenFileFormat format);

// The ids of `files`, in order, in blocks. Every file's layout is checked on construction, before
// any id is read. Move-only.
class TokenFileReader {
 public:
  TokenFileReader(std::vector<std::string> files, TokenFileFormat format, int vocab_size);
  TokenFileReader(TokenFileReader&&) noexcept;
  ~TokenFileReader();

  // The next at most `max` ids, into `out` (resized); false once every file is read. strata::Error
  // naming the file and the id's position in it when an id is not below vocab_size.
  bool next(std::vector<std::int32_t>& out, std::size_t max);
  std::uint64_t total_tokens() const { return total_tokens_; }

 private:
  void open_next_file();

  std::vector<std::string> files_;
  std::vector<TokenFileLayout> layouts_;
  int vocab_size_;
  std::uint64_t total_tokens_ = 0;
  std::size_t file_ = 0;  // the file being read; files_.size() at the end
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> stream_{nullptr, &std::fclose};
  std::uint64_t read_in_file_ = 0;  // ids of file_ read so far
  std::vector<unsigned char> bytes_;
};

// Cuts a stream of ids, fed in pieces of any size, into documents (the cut above). `emit` receives
// runs of ids in stream order with the index of the document they belong to; a document's runs end
// with its EOS.
class EosDocuments {
 public:
  using Emit = std::function<void(std::size_t document, std::span<const std::int32_t> ids)>;
  EosDocuments(std::int32_t eos_id, Emit emit) : eos_id_(eos_id), emit_(std::move(emit)) {}

  void feed(std::span<const std::int32_t> ids);
  // Ends the last document with EOS if it has none.
  void finish();

  std::size_t documents() const { return document_; }  // so far; all of them after finish()
  bool dropped_leading_eos() const { return dropped_leading_eos_; }
  bool appended_final_eos() const { return appended_final_eos_; }

 private:
  std::int32_t eos_id_;
  Emit emit_;
  bool started_ = false;  // an id has been fed
  bool open_ = false;     // the current document has ids but no EOS yet
  bool dropped_leading_eos_ = false;
  bool appended_final_eos_ = false;
  std::size_t document_ = 0;
};

}  // namespace strata
