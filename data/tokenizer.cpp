// SentencePiece is used through its C++ API; training reads sentences from memory through a
// SentenceIterator and returns the serialized model, so nothing touches the disk here.
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "data/documents.h"
#include "data/sha256.h"
#include "model/core/error.h"

namespace strata {
namespace {

// SentencePiece loads at most this many sentences, sampled with a fixed seed, bounding the
// trainer's memory on large corpora (its own suggested scale is a few million).
constexpr int kMaxTrainingSentences = 4'000'000;
constexpr unsigned kTrainingSeed = 20240601;

// The sample's sentences, in order, as SentencePiece reads them.
class SampleIterator : public sentencepiece::SentenceIterator {
 public:
  explicit SampleIterator(const TrainingSample& sample) : sample_(sample) { load(); }
  bool done() const override { return index_ >= sample_.sentences(); }
  void Next() override {
    offset_ += sample_.lengths()[index_++];
    load();
  }
  const std::string& value() const override { return current_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (!done()) current_.assign(sample_.text(), offset_, sample_.lengths()[index_]);
  }

  const TrainingSample& sample_;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;  // of sentence index_ in the sample's text
  std::string current_;
};

// SentencePiece statuses read "Internal: ./src/file.cc(580) [condition] Reason."; keep the reason.
std::string readable_reason(const sentencepiece::util::Status& status) {
  std::string message = status.error_message();
  const std::size_t open = message.find(") [");
  if (open != std::string::npos) {
    const std::size_t close = message.find("] ", open);
    if (close != std::string::npos) message = message.substr(close + 2);
  }
  // A file that is not a model protobuf at all fails a parse check that gives no reason.
  return message.empty() ? "its bytes do not parse as a model file" : message;
}

}  // namespace

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& model_path) {
  return from_serialized(read_file_bytes(model_path), "'" + model_path + "'");
}

Tokenizer Tokenizer::from_serialized(const std::string& model_bytes, const std::string& origin) {
  Tokenizer tokenizer;
  tokenizer.processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = tokenizer.processor_->LoadFromSerializedProto(model_bytes);
  if (!status.ok()) {
    fail(origin, " is not a SentencePiece model: ", readable_reason(status));
  }
  if (tokenizer.processor_->eos_id() < 0) fail(origin, " defines no EOS id");
  tokenizer.serialized_ = model_bytes;
  return tokenizer;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) fail("tokenizer encode failed: ", readable_reason(status));
  return ids;
}

std::vector<int> Tokenizer::encode_after_space(std::string_view text) const {
  // A dummy prefix shows as the word-boundary mark U+2581 opening the first piece of a word.
  const std::vector<int> probe = encode("x");
  const bool dummy_prefix = !probe.empty() && processor_->IdToPiece(probe[0]).starts_with("\u2581");
  return encode(dummy_prefix ? std::string(text) : " " + std::string(text));
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  const auto status = processor_->Decode(ids, &text);
  if (!status.ok()) fail("tokenizer decode failed: ", readable_reason(status));
  return text;
}

int Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int Tokenizer::eos_id() const { return processor_->eos_id(); }
std::string Tokenizer::sha256() const { return sha256_hex(serialized_); }

Tokenizer train_tokenizer(const std::vector<std::string>& documents, int vocab_size, int threads,
                          const std::string& corpus_name) {
  TrainingSample sample(~std::uint64_t{0});
  for (const std::string& document : documents) sample.add_document(document);
  return train_tokenizer(sample, vocab_size, threads, corpus_name);
}

Tokenizer train_tokenizer(const TrainingSample& sample, int vocab_size, int threads,
                          const std::string& corpus_name) {
  if (vocab_size <= 0) fail("tokenizer vocabulary size must be positive, got ", vocab_size);
  const std::unordered_map<std::string, std::string> options = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"num_threads", std::to_string(std::max(1, threads))},
      // Lossless: every byte sequence encodes (no <unk>) and decodes back to the same text.
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},  // runs of spaces (code indentation) merge
      {"split_digits", "true"},
      {"character_coverage", "0.9995"},  // rarer characters go through byte fallback
      {"max_sentence_length", std::to_string(kMaxTrainingSentenceBytes)},
      {"input_sentence_size", std::to_string(kMaxTrainingSentences)},
      {"shuffle_input_sentence", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "2"},  // SentencePiece's progress chatter would drown our own output
  };
  // The sentence sample (only drawn when the corpus exceeds kMaxTrainingSentences) is then the
  // same on every run.
  sentencepiece::SetRandomGeneratorSeed(kTrainingSeed);
  SampleIterator sentences(sample);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &sentences, &model);
  if (!status.ok()) {
    fail("tokenizer training on ", corpus_name, " failed: ", readable_reason(status));
  }
  return Tokenizer::from_serialized(model, "the trained tokenizer model");
}

}  // namespace strata
