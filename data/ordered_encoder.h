// Parallel tokenization of a stream of documents with in-order delivery.
//
// The documents come from a source (a function that yields the next one), so a corpus is never
// held whole: worker threads take turns reading the next document from the source (under a lock,
// so documents are numbered in source order) and encode it whole (so the ids are exactly
// Tokenizer::encode of its text); the calling thread receives each document's ids in order and
// may write them out while the workers go on. Reading is sequential but cheap next to encoding,
// and whichever worker is free reads, so no thread waits on a file boundary or a slow document.
//
// Memory stays bounded: workers claim a new document only while the text of claimed-but-not-yet-
// consumed documents is under kMaxPendingBytes (one document is always allowed, however large).
// An exception in the source, a worker or `consume` stops the workers and is rethrown.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace strata {

struct EncodeProgress {
  std::size_t documents_done = 0;
  std::uint64_t bytes_done = 0;  // text bytes of the documents consumed so far
};

inline constexpr std::uint64_t kMaxPendingBytes = std::uint64_t{256} << 20;

// Fills `document` with the next document and returns true, or returns false after the last one.
// Called by one thread at a time, never again once it returned false or threw.
using DocumentSource = std::function<bool(std::string& document)>;

// Calls consume(i, ids of document i) for i = 0, 1, ... on the calling thread, and `progress`
// (if set) after each document and about every 200 ms while waiting for one. Returns the number
// of documents.
std::size_t encode_in_order(const Tokenizer& tokenizer, const DocumentSource& next_document,
                            int threads,
                            const std::function<void(std::size_t, std::vector<int>&)>& consume,
                            const std::function<void(const EncodeProgress&)>& progress = {});

}  // namespace strata
