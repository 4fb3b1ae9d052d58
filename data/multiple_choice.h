// Multiple-choice examples in HellaSwag's JSON Lines layout (what `eval --multiple-choice` and
// train.eval_multiple_choice score, train/multiple_choice.h): one JSON object a line with
//   "ctx"     the context, a string;
//   "endings" its candidate continuations, an array of at least 2 strings;
//   "label"   the index of the right one, an integer in [0, endings).
// Other members are ignored; blank lines are skipped.
//
// Tokenization: HellaSwag's text is ctx and an ending joined by one space. The context is
// EncodeAsIds(ctx) and each ending the ids it takes after a space (Tokenizer::encode_after_space:
// with SentencePiece's dummy prefix, EncodeAsIds(ending), whose leading '▁' is that space), so an
// ending's ids are the same whatever the context, and together they are the joined text's ids. A
// context of no tokens becomes the EOS id (the start of a document), so every ending token has a
// token before it.
//
// Every problem is one strata::Error "FILE:LINE: reason": not JSON, a missing or mistyped field,
// fewer than 2 endings, a label out of range, an empty ending or one of no tokens (its
// log-likelihood, a sum over nothing, would be 0 and always win), an ending longer than seq_len
// tokens (no context token would be left to condition it on), a file without examples.
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace strata {

struct MultipleChoiceExample {
  int line = 0;                           // in the file, from 1
  std::vector<int> context;               // at least one id
  std::vector<std::vector<int>> endings;  // at least two, each of 1 … seq_len ids
  int label = 0;                          // in [0, endings.size())
};

// The examples of `path`, in file order, tokenized with `tokenizer` for a model of `seq_len`.
std::vector<MultipleChoiceExample> read_multiple_choice(const std::string& path,
                                                        const Tokenizer& tokenizer, int seq_len);

}  // namespace strata
