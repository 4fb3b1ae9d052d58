#include "data/training_sample.h"

#include <algorithm>
#include <cstring>

#include "model/core/counter_rng.h"

namespace strata {
namespace {

constexpr std::uint64_t kBookkeepingBytes = sizeof(std::uint16_t) + sizeof(std::uint32_t);
constexpr std::uint64_t kSampleStream = hash_name("strata.tokenize.training_sample");

}  // namespace

TrainingSample::TrainingSample(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}

void TrainingSample::add_document(std::string_view text) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    std::size_t end = std::min(text.find('\n', offset), text.size());
    std::string_view sentence;
    if (end - offset > kMaxTrainingSentenceBytes) {
      end = offset + kMaxTrainingSentenceBytes;
      while ((static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // no split mid-char
      sentence = text.substr(offset, end - offset);
      offset = end;
    } else {
      sentence = text.substr(offset, end - offset);
      offset = end + 1;
    }
    if (!sentence.empty() && sentence != "\r") add_sentence(sentence);
  }
}

void TrainingSample::add_sentence(std::string_view sentence) {
  const auto key = static_cast<std::uint32_t>(hash_combine(kSampleStream, sentences_seen_) >> 32);
  ++sentences_seen_;
  text_bytes_seen_ += sentence.size();
  if (!keep_all_ && key >= threshold_) return;
  // Growth stops at the budget plus one sentence (the most the text holds before shrink() runs),
  // where doubling would reserve up to twice the budget.
  if (text_.size() + sentence.size() > text_.capacity()) {
    const std::uint64_t limit = max_bytes_ + std::min<std::uint64_t>(kMaxTrainingSentenceBytes,
                                                                     ~max_bytes_);  // no overflow
    text_.reserve(std::max<std::uint64_t>(text_.size() + sentence.size(),
                                          std::min<std::uint64_t>(2 * text_.capacity(), limit)));
  }
  text_.append(sentence);
  lengths_.push_back(static_cast<std::uint16_t>(sentence.size()));
  keys_.push_back(key);
  if (text_.size() + kBookkeepingBytes * lengths_.size() > max_bytes_) shrink();
}

void TrainingSample::shrink() {
  while (text_.size() + kBookkeepingBytes * lengths_.size() > max_bytes_) {
    threshold_ = keep_all_ ? 0xC0000000u : threshold_ < 4 ? 0 : threshold_ - threshold_ / 4;
    keep_all_ = false;
    // Compacts in place, in order: text, lengths and keys of the sentences that stay.
    std::size_t read = 0, write = 0, kept = 0;
    for (std::size_t i = 0; i < lengths_.size(); ++i) {
      const std::size_t length = lengths_[i];
      if (keys_[i] < threshold_) {
        if (write != read) std::memmove(text_.data() + write, text_.data() + read, length);
        write += length;
        lengths_[kept] = lengths_[i];
        keys_[kept] = keys_[i];
        ++kept;
      }
      read += length;
    }
    text_.resize(write);
    lengths_.resize(kept);
    keys_.resize(kept);
  }
}

}  // namespace strata
