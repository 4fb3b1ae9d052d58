// Reading tokenizer input files into documents (DESIGN §5 "Documents", a contract).
//
// A plain-text file is one document: its bytes, unchanged. A file whose name ends in `.jsonl` holds
// one document per line, the string member "text" of the JSON object on that line; blank lines are
// skipped, and a UTF-8 byte order mark at the start of the file is ignored. Every file must be
// non-empty, strictly valid UTF-8 and, for .jsonl, hold at least one document. Errors are
// strata::Error naming the file (and, for .jsonl, the line and column).
#pragma once

#include <string>
#include <vector>

namespace strata {

// The documents of one input file, in file order.
std::vector<std::string> read_documents(const std::string& path);

// The raw bytes of a file; strata::Error naming the file when it cannot be opened or read.
std::string read_file_bytes(const std::string& path);

}  // namespace strata
