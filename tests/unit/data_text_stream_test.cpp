// Streaming a growing token sequence as text (data/text_stream.h): the pieces returned add up to
// the decoded text of the whole sequence, a continuation keeps the space before it, and a
// character split over byte-fallback pieces comes out whole, never as U+FFFD.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "data/text_stream.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

namespace strata {
namespace {

// Trained on ASCII words only: accented and CJK characters encode as byte pieces.
Tokenizer ascii_tokenizer() {
  const char* words[] = {"The", "alpha", "beta", "gamma", "delta", "says", "cafe", "uber"};
  std::mt19937_64 rng(5);
  std::vector<std::string> documents;
  for (int d = 0; d < 20; ++d) {
    std::string text;
    for (int w = 0; w < 200; ++w) text += std::string(words[rng() % 8]) + " ";
    documents.push_back(text);
  }
  return train_tokenizer(documents, 300, 1);
}

TEST(TextStream, PiecesAddUpToTheWholeTextAndAreWholeCharacters) {
  const Tokenizer tokenizer = ascii_tokenizer();
  const std::string text = "The café says über 日本 alpha beta";
  const std::vector<int> ids = tokenizer.encode(text);
  ASSERT_GT(ids.size(), 20u) << "the non-ASCII characters should take several byte pieces each";
  TextStream stream(tokenizer);
  std::string streamed;
  for (int id : ids) {
    const std::string piece = stream.append(id);
    EXPECT_FALSE(find_invalid_utf8(piece).has_value());
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD after " << streamed;
    streamed += piece;
  }
  streamed += stream.finish();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(stream.ids(), ids);
}

TEST(TextStream, AContinuationKeepsTheSpaceBeforeIt) {
  const Tokenizer tokenizer = ascii_tokenizer();
  const std::vector<int> ids = tokenizer.encode("The beta gamma");
  const std::vector<int> prompt = tokenizer.encode("The");
  ASSERT_EQ(std::vector<int>(ids.begin(), ids.begin() + prompt.size()), prompt);
  const std::vector<int> continuation(ids.begin() + prompt.size(), ids.end());
  // Decoded apart, SentencePiece drops the continuation's leading space.
  ASSERT_EQ(tokenizer.decode(prompt) + tokenizer.decode(continuation), "Thebeta gamma");
  TextStream stream(tokenizer);
  std::string streamed = stream.append(prompt);
  EXPECT_EQ(streamed, "The");
  for (int id : continuation) streamed += stream.append(id);
  EXPECT_EQ(streamed + stream.finish(), "The beta gamma");
}

TEST(TextStream, AnUnfinishedCharacterIsHeldBackUntilTheEnd) {
  const Tokenizer tokenizer = ascii_tokenizer();
  const std::vector<int> ids = tokenizer.encode("beta é");
  TextStream stream(tokenizer);
  std::string streamed;
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) streamed += stream.append(ids[i]);
  EXPECT_EQ(streamed, "beta ") << "the first byte of é waits for the second";
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD") << "an incomplete sequence decodes to U+FFFD";
}

}  // namespace
}  // namespace strata
