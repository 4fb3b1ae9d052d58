// Two mutexes: `source_mutex` makes reading the source one worker at a time (and so numbers
// documents in source order); `mutex` guards the counters, the finished results and the error.
// A worker holds source_mutex while it waits for room to claim (can_claim), which is harmless:
// the other workers would wait for the same room. Results wait in a map keyed by document index
// until the consumer reaches them, so out-of-order completion costs no extra copies.
#include "data/ordered_encoder.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace strata {
namespace {

struct EncodedDocument {
  std::vector<int> ids;
  std::uint64_t text_bytes = 0;
};

struct SharedState {
  std::mutex source_mutex;
  std::mutex mutex;
  std::condition_variable can_claim;
  std::condition_variable finished;
  std::size_t next_to_claim = 0;
  std::size_t next_to_consume = 0;
  std::uint64_t pending_bytes = 0;  // text of claimed documents not yet consumed
  bool source_done = false;         // the source returned false (next_to_claim is the count)
  std::map<std::size_t, EncodedDocument> results;
  std::exception_ptr error;
  bool stop = false;
};

void record_error(SharedState& state) {
  {
    std::lock_guard lock(state.mutex);
    if (!state.error) state.error = std::current_exception();
    state.stop = true;
  }
  state.can_claim.notify_all();
  state.finished.notify_one();
}

void encode_worker(const Tokenizer& tokenizer, const DocumentSource& next_document,
                   SharedState& state) {
  std::string document;
  while (true) {
    std::size_t index = 0;
    {
      std::lock_guard source_lock(state.source_mutex);
      {
        std::unique_lock lock(state.mutex);
        state.can_claim.wait(lock, [&] {
          return state.stop || state.source_done || state.next_to_claim == state.next_to_consume ||
                 state.pending_bytes < kMaxPendingBytes;
        });
        if (state.stop || state.source_done) return;
      }
      bool more = false;
      try {
        more = next_document(document);
      } catch (...) {
        record_error(state);
        return;
      }
      std::lock_guard lock(state.mutex);
      if (!more) {
        state.source_done = true;
        state.finished.notify_one();
        return;
      }
      index = state.next_to_claim++;
      state.pending_bytes += document.size();
    }
    try {
      EncodedDocument encoded{tokenizer.encode(document), document.size()};
      std::lock_guard lock(state.mutex);
      state.results.emplace(index, std::move(encoded));
    } catch (...) {
      record_error(state);
      return;
    }
    state.finished.notify_one();
  }
}

// Stops and joins the workers however the consumer leaves (normally or by an exception).
class WorkerGroup {
 public:
  explicit WorkerGroup(SharedState& state) : state_(state) {}
  ~WorkerGroup() {
    {
      std::lock_guard lock(state_.mutex);
      state_.stop = true;
    }
    state_.can_claim.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }
  std::vector<std::thread>& threads() { return threads_; }

 private:
  SharedState& state_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::size_t encode_in_order(const Tokenizer& tokenizer, const DocumentSource& next_document,
                            int threads,
                            const std::function<void(std::size_t, std::vector<int>&)>& consume,
                            const std::function<void(const EncodeProgress&)>& progress) {
  EncodeProgress status;
  SharedState state;
  WorkerGroup workers(state);
  for (int t = 0; t < std::max(1, threads); ++t) {
    workers.threads().emplace_back(encode_worker, std::cref(tokenizer), std::cref(next_document),
                                   std::ref(state));
  }
  for (std::size_t index = 0;; ++index) {
    EncodedDocument encoded;
    {
      std::unique_lock lock(state.mutex);
      while (true) {
        if (state.error) std::rethrow_exception(state.error);
        auto ready = state.results.find(index);
        if (ready != state.results.end()) {
          encoded = std::move(ready->second);
          state.results.erase(ready);
          break;
        }
        if (state.source_done && index == state.next_to_claim) return index;
        if (state.finished.wait_for(lock, std::chrono::milliseconds(200)) ==
                std::cv_status::timeout &&
            progress) {
          lock.unlock();
          progress(status);
          lock.lock();
        }
      }
    }
    consume(index, encoded.ids);
    {
      std::lock_guard lock(state.mutex);
      state.next_to_consume = index + 1;
      state.pending_bytes -= encoded.text_bytes;
    }
    state.can_claim.notify_all();
    status.documents_done = index + 1;
    status.bytes_done += encoded.text_bytes;
    if (progress) progress(status);
  }
}

}  // namespace strata
