// Fuzz target: the tokenizer's document reader (data/documents.h), for plain text and JSONL, as
// they are and gzip- or zstd-compressed (data/compressed_stream.h).
//
// Input: the first byte picks the file kind (even: .jsonl, odd: .txt) and, by (byte / 2) % 3, its
// compression (none, .gz, .zst); the rest is the file. A rejected file must be a strata::Error;
// the documents of an accepted one must be valid UTF-8 (the contract the tokenizer relies on), and
// an uncompressed plain-text file must come back unchanged.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/documents.h"
#include "data/utf8.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool jsonl = data[0] % 2 == 0;
  const char* const suffixes[] = {"", ".gz", ".zst"};
  const std::string suffix = suffixes[(data[0] / 2) % 3];
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const strata::fuzz::InputFile file(bytes, (jsonl ? "input.jsonl" : "input.txt") + suffix);
  strata::fuzz::expect_user_errors_only([&] {
    const std::vector<std::string> documents = strata::read_documents(file.path());
    for (const std::string& document : documents) {
      if (strata::find_invalid_utf8(document)) {
        std::fprintf(stderr, "fuzz finding: a document is not valid UTF-8\n");
        std::abort();
      }
    }
    if (!jsonl && suffix.empty() && (documents.size() != 1 || documents[0] != bytes)) {
      std::fprintf(stderr, "fuzz finding: a plain-text file was not read unchanged\n");
      std::abort();
    }
  });
  return 0;
}
