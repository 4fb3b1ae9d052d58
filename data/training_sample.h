// The text a tokenizer is trained on, gathered from a stream of documents in bounded memory.
//
// SentencePiece's trainer is line-oriented: its sentences are the non-empty lines of every
// document (a line of only "\r" is empty), in document order, a line longer than
// kMaxTrainingSentenceBytes cut into pieces of at most that size at UTF-8 character boundaries.
// (Newlines never become part of a piece; they encode through byte fallback.)
//
// The sample keeps every sentence while they fit in `max_bytes` (the sentences' bytes plus 6
// bytes of bookkeeping each). Past that it becomes a uniform sample: sentence i (counted over the
// whole stream) stays iff a hash of i is below a threshold, and each time the sample outgrows
// `max_bytes` the threshold drops by a quarter and the sentences above it leave. So the sample is
// deterministic for a given stream, independent of how it was cut into documents or files, holds
// between 3/4 and all of `max_bytes` once sampling has begun, and keeps the stream's order. A
// corpus that fits is passed to SentencePiece whole, exactly as if no sample were taken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// SentencePiece skips training sentences longer than its max_sentence_length; lines are cut to
// this size instead (tokenizer.cpp passes it as max_sentence_length).
inline constexpr std::size_t kMaxTrainingSentenceBytes = 16384;

// The default budget of `tokenize` (--sample-mb 256). SentencePiece's trainer needs several times
// its sample in memory (docs/PERFORMANCE.md, "tokenize").
inline constexpr std::uint64_t kDefaultTrainingSampleBytes = 256'000'000;

class TrainingSample {
 public:
  explicit TrainingSample(std::uint64_t max_bytes = kDefaultTrainingSampleBytes);

  // Adds the sentences of one document (see above).
  void add_document(std::string_view document);

  std::size_t sentences() const { return lengths_.size(); }
  std::uint64_t text_bytes() const { return text_.size(); }
  std::uint64_t sentences_seen() const { return sentences_seen_; }  // added, kept or not
  std::uint64_t text_bytes_seen() const { return text_bytes_seen_; }
  bool sampled() const { return !keep_all_; }  // some sentence was left out

  // The kept sentences, back to back in stream order, and their lengths.
  const std::string& text() const { return text_; }
  const std::vector<std::uint16_t>& lengths() const { return lengths_; }

 private:
  void add_sentence(std::string_view sentence);
  void shrink();  // lowers the threshold until the sample fits

  std::uint64_t max_bytes_;
  std::string text_;                    // kept sentences, back to back
  std::vector<std::uint16_t> lengths_;  // their lengths (<= kMaxTrainingSentenceBytes)
  std::vector<std::uint32_t> keys_;     // their hashes' top 32 bits
  bool keep_all_ = true;
  std::uint32_t threshold_ = 0;  // once sampling: a sentence stays iff key < threshold_
  std::uint64_t sentences_seen_ = 0;
  std::uint64_t text_bytes_seen_ = 0;
};

}  // namespace strata
