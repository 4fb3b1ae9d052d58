// Encoding a stream of documents with several threads (data/ordered_encoder.h): the ids arrive in
// source order, each exactly Tokenizer::encode of its document, whatever the thread count and
// however uneven the documents; an error in the source or the consumer stops it and comes back.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/ordered_encoder.h"
#include "data/tokenizer.h"
#include "model/core/error.h"
#include "tests/support/error_of.h"

namespace strata {
namespace {

using testing::error_of;

// Documents of very uneven sizes (a few bytes to ~30 KB), so workers finish out of order.
std::vector<std::string> uneven_documents(std::size_t count) {
  const char* words[] = {"alpha ", "beta ", "gamma\n", "delta ", "caf\xC3\xA9 ", "42 "};
  std::mt19937 rng(11);
  std::vector<std::string> documents;
  for (std::size_t d = 0; d < count; ++d) {
    const std::size_t length = d % 17 == 0 ? 5000 : rng() % 40;
    std::string text;
    for (std::size_t w = 0; w < length; ++w) text += words[rng() % 6];
    documents.push_back(text);
  }
  return documents;
}

DocumentSource source_of(const std::vector<std::string>& documents, std::size_t& next) {
  return [&documents, &next](std::string& document) {
    if (next == documents.size()) return false;
    document = documents[next++];
    return true;
  };
}

TEST(OrderedEncoder, DeliversEachDocumentsIdsInSourceOrder) {
  const std::vector<std::string> documents = uneven_documents(120);
  const Tokenizer tokenizer = train_tokenizer(documents, 300, 1);
  for (const int threads : {1, 3, 8}) {
    SCOPED_TRACE(threads);
    std::size_t next = 0, consumed = 0;
    std::uint64_t bytes = 0;
    const std::size_t count = encode_in_order(
        tokenizer, source_of(documents, next), threads,
        [&](std::size_t index, std::vector<int>& ids) {
          ASSERT_EQ(index, consumed);
          EXPECT_EQ(ids, tokenizer.encode(documents[index]));
          ++consumed;
        },
        [&](const EncodeProgress& progress) { bytes = progress.bytes_done; });
    EXPECT_EQ(count, documents.size());
    EXPECT_EQ(consumed, documents.size());
    std::uint64_t total = 0;
    for (const std::string& document : documents) total += document.size();
    EXPECT_EQ(bytes, total);
  }
  std::size_t next = 0;
  const std::vector<std::string> none;
  EXPECT_EQ(encode_in_order(tokenizer, source_of(none, next), 2,
                            [](std::size_t, std::vector<int>&) { FAIL(); }),
            0u);
}

TEST(OrderedEncoder, ErrorsInTheSourceOrTheConsumerComeBack) {
  const std::vector<std::string> documents = uneven_documents(60);
  const Tokenizer tokenizer = train_tokenizer(documents, 300, 1);
  std::size_t consumed = 0;
  const DocumentSource failing = [&, next = std::size_t{0}](std::string& document) mutable {
    if (next == 40) fail("input file 'x.jsonl.gz' is truncated");
    document = documents[next++];
    return true;
  };
  EXPECT_EQ(error_of([&] {
              encode_in_order(tokenizer, failing, 3,
                              [&](std::size_t, std::vector<int>&) { ++consumed; });
            }),
            "input file 'x.jsonl.gz' is truncated");
  EXPECT_LE(consumed, 40u);

  std::size_t next = 0;
  EXPECT_EQ(error_of([&] {
              encode_in_order(tokenizer, source_of(documents, next), 3,
                              [&](std::size_t index, std::vector<int>&) {
                                if (index == 25) fail("disk full");
                              });
            }),
            "disk full");
}

}  // namespace
}  // namespace strata
