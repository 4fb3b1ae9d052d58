// Every format goes through the same line reader: a line is checked for UTF-8 on its own (a valid
// multi-byte sequence never holds '\n', so line by line finds exactly the byte a whole-file check
// finds), and then becomes part of a document, a document, or is skipped.
#include "data/documents.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "data/compressed_stream.h"
#include "data/json_line.h"
#include "data/line_reader.h"
#include "data/utf8.h"
#include "model/core/error.h"

namespace strata {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

struct DocumentReader::State {
  State(const std::string& path, TextSplit split, const std::string& text_field)
      : path(path),
        json_lines(is_json_lines(path)),
        split(split),
        text_field(text_field),
        stream(path),
        lines(stream) {}

  // The next line, checked for UTF-8; false at the end of the file.
  bool next_line(std::string_view& line) {
    if (!lines.next(line)) return false;
    if (auto bad = find_invalid_utf8(line)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(line[*bad]));
      fail("input file '", path, "' is not valid UTF-8: invalid byte ", hex, " at byte offset ",
           lines.line_offset() + *bad, " (line ", lines.line_number(), ")");
    }
    return true;
  }

  // After the last line: a file without content or without a document is an error.
  bool finish(bool documents_required) {
    done = true;
    if (lines.content_bytes() == 0) fail("input file '", path, "' is empty");
    if (documents_required && documents == 0)
      fail("input file '", path, "' holds no documents (all lines are blank)");
    return false;
  }

  bool next_json_line(std::string& document) {
    constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
    std::string_view line;
    while (next_line(line)) {
      if (lines.line_number() == 1 && line.starts_with(kByteOrderMark))
        line.remove_prefix(kByteOrderMark.size());
      if (is_blank(line)) continue;
      try {
        document = json_line_text(line, text_field);
      } catch (const Error& e) {
        fail(path, ":", lines.line_number(), ": ", e.what());
      }
      ++documents;
      return true;
    }
    return finish(true);
  }

  bool next_whole_file(std::string& document) {
    document.clear();
    std::string_view line;
    while (next_line(line)) {
      document.append(line);
      if (lines.had_newline()) document += '\n';
    }
    finish(false);
    return true;
  }

  bool next_paragraph(std::string& document) {
    document.clear();
    std::string_view line;
    while (next_line(line)) {
      if (!is_blank(line)) {
        document.append(line);
        if (lines.had_newline()) document += '\n';
      } else if (!document.empty()) {
        ++documents;
        return true;
      }
    }
    if (!document.empty()) {
      ++documents;
      return true;
    }
    return finish(true);
  }

  bool next_nonblank_line(std::string& document) {
    std::string_view line;
    while (next_line(line)) {
      if (is_blank(line)) continue;
      // Without its line break, CRLF's CR included.
      document.assign(line.substr(0, line.find_last_not_of('\r') + 1));
      ++documents;
      return true;
    }
    return finish(true);
  }

  std::string path;
  bool json_lines;
  TextSplit split;
  std::string text_field;
  CompressedStream stream;
  LineReader lines;
  std::size_t documents = 0;  // returned so far
  bool done = false;
};

TextSplit parse_text_split(const std::string& name) {
  if (name == "file") return TextSplit::file;
  if (name == "paragraphs") return TextSplit::paragraphs;
  if (name == "lines") return TextSplit::lines;
  fail("--split must be file, paragraphs or lines, got '", name, "'");
}

bool is_json_lines(const std::string& path) {
  return std::filesystem::path(without_compression_suffix(path)).extension() == ".jsonl";
}

DocumentReader::DocumentReader(const std::string& path, TextSplit split,
                               const std::string& text_field)
    : state_(std::make_unique<State>(path, split, text_field)) {}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::next(std::string& document) {
  State& state = *state_;
  if (state.done) return false;
  if (state.json_lines) return state.next_json_line(document);
  switch (state.split) {
    case TextSplit::file:
      return state.next_whole_file(document);
    case TextSplit::paragraphs:
      return state.next_paragraph(document);
    case TextSplit::lines:
      return state.next_nonblank_line(document);
  }
  return false;
}

const std::string& DocumentReader::path() const { return state_->path; }

std::uint64_t DocumentReader::file_bytes_read() const { return state_->stream.file_bytes_read(); }

std::vector<std::string> read_documents(const std::string& path, TextSplit split,
                                        const std::string& text_field) {
  DocumentReader reader(path, split, text_field);
  std::vector<std::string> documents;
  std::string document;
  while (reader.next(document)) documents.push_back(std::move(document));
  return documents;
}

CorpusReader::CorpusReader(std::vector<std::string> paths, TextSplit split, std::string text_field)
    : paths_(std::move(paths)), split_(split), text_field_(std::move(text_field)) {}

bool CorpusReader::next(std::string& document) {
  while (file_ < paths_.size()) {
    if (!reader_) reader_ = std::make_unique<DocumentReader>(paths_[file_], split_, text_field_);
    if (reader_->next(document)) return true;
    finished_bytes_ += reader_->file_bytes_read();
    reader_.reset();
    ++file_;
  }
  return false;
}

std::uint64_t CorpusReader::file_bytes_read() const {
  return finished_bytes_ + (reader_ ? reader_->file_bytes_read() : 0);
}

std::string read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("cannot read '", path, "': it is a directory");
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot open '", path, "': ", std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) fail("cannot read '", path, "': ", std::strerror(errno));
  return bytes;
}

}  // namespace strata
