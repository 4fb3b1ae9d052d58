// Reading tokenizer input files into documents (docs/ARCHITECTURE.md §5 "Documents", a contract),
// as a stream.
//
// Formats, by the file name once a compression suffix is dropped (`.gz` gzip, `.zst` zstd:
// data/compressed_stream.h decompresses them on the fly):
//   - `.jsonl` (so also `.jsonl.gz`, `.jsonl.zst`): one document per line, the string member
//     `text_field` (default "text") of the JSON object on that line (data/json_line.h: a dotted
//     path such as "meta.content" reaches into nested objects). Blank lines are skipped, and a
//     UTF-8 byte order mark at the start of the file is ignored.
//   - anything else is plain text: the file is one document, its bytes unchanged
//     (TextSplit::file, the default). For a corpus that is one large file, TextSplit::paragraphs
//     makes each paragraph a document (text between blank lines, i.e. lines holding only spaces,
//     tabs or CR; the paragraph's own lines and their line breaks unchanged), TextSplit::lines
//     each non-blank line (without its line break).
// Every file must be non-empty, strictly valid UTF-8 and, for .jsonl and the split forms, hold at
// least one document. Errors are strata::Error naming the file (and the line, for .jsonl also the
// column; for invalid UTF-8 the byte offset in the decompressed content and its line).
//
// Memory: a DocumentReader holds one line buffer (data/line_reader.h) and the document it is
// building, so it is bounded by the largest document (for TextSplit::file the whole file is that
// document), not by the file. Errors come when the reader reaches them: a reader that fails on
// line 900 has already returned the documents before it, so a caller that must not act on a
// partial corpus reads it all first (tools/tokenize.cpp's first pass does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// How a plain-text file is cut into documents (see above); .jsonl files are never cut further.
enum class TextSplit { file, paragraphs, lines };

// "file", "paragraphs" or "lines"; strata::Error naming the choices otherwise.
TextSplit parse_text_split(const std::string& name);

// True for the JSON Lines names: .jsonl, .jsonl.gz, .jsonl.zst.
bool is_json_lines(const std::string& path);

// The documents of one input file, one at a time, in file order.
class DocumentReader {
 public:
  // Opens `path` (strata::Error if it cannot be opened); nothing is read yet.
  explicit DocumentReader(const std::string& path, TextSplit split = TextSplit::file,
                          const std::string& text_field = "text");
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next document into `document`; false after the last one.
  bool next(std::string& document);

  const std::string& path() const;
  // Bytes of the file consumed so far (compressed bytes for .gz/.zst).
  std::uint64_t file_bytes_read() const;

  struct State;  // documents.cpp

 private:
  std::unique_ptr<State> state_;
};

// Every document of one input file, in file order: for small inputs and tests.
std::vector<std::string> read_documents(const std::string& path, TextSplit split = TextSplit::file,
                                        const std::string& text_field = "text");

// The documents of several files, one after another, as one stream: each file is opened when
// the previous one ends, so a consumer sees no break at file boundaries.
class CorpusReader {
 public:
  CorpusReader(std::vector<std::string> paths, TextSplit split, std::string text_field);

  bool next(std::string& document);

  // Bytes of the input files consumed so far, over all files (compressed bytes for .gz/.zst).
  std::uint64_t file_bytes_read() const;

 private:
  std::vector<std::string> paths_;
  TextSplit split_;
  std::string text_field_;
  std::size_t file_ = 0;  // index of the open (or next) file
  std::unique_ptr<DocumentReader> reader_;
  std::uint64_t finished_bytes_ = 0;  // of the files already closed
};

// The raw bytes of a file; strata::Error naming the file when it cannot be opened or read.
std::string read_file_bytes(const std::string& path);

}  // namespace strata
