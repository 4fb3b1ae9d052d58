// Printing a token sequence as it grows: the ids are decoded as one text, so SentencePiece puts
// each piece's spaces where decoding the finished sequence would (a continuation decoded apart
// from its prompt loses its leading space: "The" + "Software" instead of "The Software"), and each
// append returns only what the text gained.
//
// SentencePiece decodes piece by piece; the one part of the text that changes as ids are added is
// a trailing UTF-8 sequence still missing bytes (byte-fallback pieces), which decodes to U+FFFD
// until its last byte arrives. That tail is held back until it is complete or finish() is called,
// so the pieces returned add up to the decoded text of the whole sequence.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace strata {

class TextStream {
 public:
  // `tokenizer` is not owned and must outlive the stream.
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Appends `ids` to the sequence; returns the text that follows what earlier calls returned.
  std::string append(const std::vector<int>& ids);
  std::string append(int id) { return append(std::vector<int>{id}); }
  // The rest of the text (a held-back tail), once the sequence is complete.
  std::string finish();
  const std::vector<int>& ids() const { return ids_; }

 private:
  const Tokenizer& tokenizer_;
  std::vector<int> ids_;
  std::size_t shown_ = 0;  // bytes of the decoded text returned so far
};

}  // namespace strata
