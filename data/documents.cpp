// Whole files are read into memory: tokenizer training needs all the text anyway, and it keeps
// error positions (byte offset, line) exact.
#include "data/documents.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "data/json_line.h"
#include "data/utf8.h"
#include "model/core/error.h"

namespace strata {
namespace {

bool ends_with_jsonl(const std::string& path) {
  return std::filesystem::path(path).extension() == ".jsonl";
}

std::size_t line_of_offset(std::string_view text, std::size_t offset) {
  return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + offset, '\n'));
}

void check_utf8(const std::string& path, std::string_view bytes) {
  if (auto bad = find_invalid_utf8(bytes)) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(bytes[*bad]));
    fail("input file '", path, "' is not valid UTF-8: invalid byte ", hex, " at byte offset ", *bad,
         " (line ", line_of_offset(bytes, *bad), ")");
  }
}

std::vector<std::string> parse_jsonl(const std::string& path, std::string_view bytes) {
  constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
  if (bytes.starts_with(kByteOrderMark)) bytes.remove_prefix(kByteOrderMark.size());
  std::vector<std::string> documents;
  std::size_t line_number = 0;
  while (!bytes.empty()) {
    ++line_number;
    const std::size_t end = std::min(bytes.find('\n'), bytes.size());
    const std::string_view line = bytes.substr(0, end);
    bytes.remove_prefix(std::min(end + 1, bytes.size()));
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      documents.push_back(json_line_text(line));
    } catch (const Error& e) {
      fail(path, ":", line_number, ": ", e.what());
    }
  }
  if (documents.empty()) fail("input file '", path, "' holds no documents (all lines are blank)");
  return documents;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// The paragraphs (kParagraphs) or non-blank lines of a plain-text file, in order.
std::vector<std::string> split_text(const std::string& path, std::string_view bytes,
                                    TextSplit split) {
  std::vector<std::string> documents;
  std::string paragraph;
  while (!bytes.empty()) {
    const std::size_t end = std::min(bytes.find('\n'), bytes.size());
    const std::string_view line = bytes.substr(0, end);
    const bool had_newline = end < bytes.size();
    bytes.remove_prefix(std::min(end + 1, bytes.size()));
    if (split == TextSplit::lines) {
      // Without its line break, CRLF's CR included.
      if (!is_blank(line)) documents.emplace_back(line.substr(0, line.find_last_not_of('\r') + 1));
    } else if (!is_blank(line)) {
      paragraph.append(line);
      if (had_newline) paragraph += '\n';
    } else if (!paragraph.empty()) {
      documents.push_back(std::move(paragraph));
      paragraph.clear();
    }
  }
  if (!paragraph.empty()) documents.push_back(std::move(paragraph));
  if (documents.empty()) fail("input file '", path, "' holds no documents (all lines are blank)");
  return documents;
}

}  // namespace

TextSplit parse_text_split(const std::string& name) {
  if (name == "file") return TextSplit::file;
  if (name == "paragraphs") return TextSplit::paragraphs;
  if (name == "lines") return TextSplit::lines;
  fail("--split must be file, paragraphs or lines, got '", name, "'");
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

std::vector<std::string> read_documents(const std::string& path, TextSplit split) {
  std::string bytes = read_file_bytes(path);
  if (bytes.empty()) fail("input file '", path, "' is empty");
  check_utf8(path, bytes);
  if (ends_with_jsonl(path)) return parse_jsonl(path, bytes);
  if (split != TextSplit::file) return split_text(path, bytes, split);
  std::vector<std::string> documents;
  documents.push_back(std::move(bytes));
  return documents;
}

}  // namespace strata
