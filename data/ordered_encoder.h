// Parallel tokenization with in-order delivery.
//
// Worker threads encode documents independently (each document whole, so the ids are exactly
// Tokenizer::encode of its text); the calling thread receives each document's ids in document
// order and may write them out while the workers go on. Memory stays bounded: workers claim a new
// document only while the text of claimed-but-not-yet-consumed documents is under
// kMaxPendingBytes (one document is always allowed, however large), so a corpus is never held
// twice as tokens. An exception in a worker or in `consume` stops the workers and is rethrown.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace strata {

struct EncodeProgress {
  std::size_t documents_done = 0;
  std::size_t documents_total = 0;
  std::uint64_t bytes_done = 0;  // text bytes of the documents consumed so far
  std::uint64_t bytes_total = 0;
};

inline constexpr std::uint64_t kMaxPendingBytes = std::uint64_t{256} << 20;

// Calls consume(i, ids of documents[i]) for i = 0, 1, ... on the calling thread, and `progress`
// (if set) after each document and about every 200 ms while waiting for one.
void encode_in_order(const Tokenizer& tokenizer, const std::vector<std::string>& documents,
                     int threads,
                     const std::function<void(std::size_t, std::vector<int>&)>& consume,
                     const std::function<void(const EncodeProgress&)>& progress = {});

}  // namespace strata
