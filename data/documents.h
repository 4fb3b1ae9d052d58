// Reading tokenizer input files into documents (DESIGN §5 "Documents", a contract).
//
// A plain-text file is one document: its bytes, unchanged (TextSplit::file, the default). For a
// corpus that is one large file, TextSplit::paragraphs makes each paragraph a document (text
// between blank lines, i.e. lines holding only spaces, tabs or CR; the paragraph's own lines and
// their line breaks unchanged), TextSplit::lines each non-blank line (without its line break).
// A file whose name ends in `.jsonl` holds
// one document per line, the string member "text" of the JSON object on that line; blank lines are
// skipped, and a UTF-8 byte order mark at the start of the file is ignored. Every file must be
// non-empty, strictly valid UTF-8 and, for .jsonl, hold at least one document. Errors are
// strata::Error naming the file (and, for .jsonl, the line and column).
#pragma once

#include <string>
#include <vector>

namespace strata {

// How a plain-text file is cut into documents (see above); .jsonl files are never cut further.
enum class TextSplit { file, paragraphs, lines };

// "file", "paragraphs" or "lines"; strata::Error naming the choices otherwise.
TextSplit parse_text_split(const std::string& name);

// The documents of one input file, in file order.
std::vector<std::string> read_documents(const std::string& path, TextSplit split = TextSplit::file);

// The raw bytes of a file; strata::Error naming the file when it cannot be opened or read.
std::string read_file_bytes(const std::string& path);

}  // namespace strata
