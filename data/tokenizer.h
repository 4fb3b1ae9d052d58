// The SentencePiece tokenizer: loading a model, encoding and decoding, and training a new one.
//
// Invariants of a Tokenizer: it holds a valid SentencePiece model that defines an EOS id, and
// `serialized()` is exactly the bytes of the .model file it came from, so `sha256()` identifies
// the model on disk; token shards record that hash (see token_shards.h). Ids are in
// [0, vocab_size()). encode/decode are const and safe to call from several threads at once.
//
// Models trained here are lossless: BPE with byte fallback (any UTF-8 encodes, no <unk>), identity
// normalization and no whitespace collapsing, so decode(encode(text)) == text for all valid UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/training_sample.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace strata {

class Tokenizer {
 public:
  // strata::Error naming the file if it is missing or not a SentencePiece model with an EOS id.
  static Tokenizer load(const std::string& model_path);
  // From the bytes of a .model file; `origin` names them in errors.
  static Tokenizer from_serialized(const std::string& model_bytes,
                                   const std::string& origin = "serialized tokenizer model");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // SentencePiece's EncodeAsIds on the whole text (no EOS appended).
  std::vector<int> encode(std::string_view text) const;
  // The ids of `text` where it follows other text after one space (as a HellaSwag ending follows
  // its context): EncodeAsIds(text) when the model adds SentencePiece's dummy prefix, whose '▁'
  // is that space (every model `tokenize` trains does), else EncodeAsIds(" " + text).
  std::vector<int> encode_after_space(std::string_view text) const;
  std::string decode(const std::vector<int>& ids) const;

  int vocab_size() const;
  int eos_id() const;
  const std::string& serialized() const { return serialized_; }
  std::string sha256() const;

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string serialized_;
};

// Trains a BPE model of `vocab_size` pieces on the sample's sentences with `threads` threads
// (ids: 0 <unk>, 1 <s>, 2 </s> = EOS; then 256 byte pieces, then characters and merges).
// Training is deterministic for a given sample and vocab size. SentencePiece itself loads at most
// 4 million sentences (a seeded reservoir sample of them when there are more). On failure (e.g. a
// vocabulary too small for the corpus's characters plus the 256 byte pieces, or larger than the
// corpus allows) throws strata::Error "tokenizer training on <corpus_name> failed:
// <SentencePiece's reason>".
Tokenizer train_tokenizer(const TrainingSample& sample, int vocab_size, int threads,
                          const std::string& corpus_name = "the documents");
// The same on every sentence of `documents` (an unbounded sample).
Tokenizer train_tokenizer(const std::vector<std::string>& documents, int vocab_size, int threads,
                          const std::string& corpus_name = "the documents");

}  // namespace strata
