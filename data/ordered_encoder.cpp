// One mutex guards the claim counter, the finished results and the error; workers sleep on
// `can_claim`, the consumer on `finished`. Results wait in a map keyed by document index until
// the consumer reaches them, so out-of-order completion costs no extra copies.
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

struct SharedState {
  std::mutex mutex;
  std::condition_variable can_claim;
  std::condition_variable finished;
  std::size_t next_to_claim = 0;
  std::size_t next_to_consume = 0;
  std::uint64_t pending_bytes = 0;  // text of claimed documents not yet consumed
  std::map<std::size_t, std::vector<int>> results;
  std::exception_ptr error;
  bool stop = false;
};

void encode_worker(const Tokenizer& tokenizer, const std::vector<std::string>& documents,
                   SharedState& state) {
  while (true) {
    std::size_t index = 0;
    {
      std::unique_lock lock(state.mutex);
      state.can_claim.wait(lock, [&] {
        return state.stop || state.next_to_claim >= documents.size() ||
               state.next_to_claim == state.next_to_consume ||
               state.pending_bytes < kMaxPendingBytes;
      });
      if (state.stop || state.next_to_claim >= documents.size()) return;
      index = state.next_to_claim++;
      state.pending_bytes += documents[index].size();
    }
    try {
      std::vector<int> ids = tokenizer.encode(documents[index]);
      std::lock_guard lock(state.mutex);
      state.results.emplace(index, std::move(ids));
    } catch (...) {
      std::lock_guard lock(state.mutex);
      if (!state.error) state.error = std::current_exception();
      state.stop = true;
      state.can_claim.notify_all();
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

void encode_in_order(const Tokenizer& tokenizer, const std::vector<std::string>& documents,
                     int threads,
                     const std::function<void(std::size_t, std::vector<int>&)>& consume,
                     const std::function<void(const EncodeProgress&)>& progress) {
  EncodeProgress status;
  status.documents_total = documents.size();
  for (const std::string& document : documents) status.bytes_total += document.size();

  SharedState state;
  WorkerGroup workers(state);
  for (int t = 0; t < std::max(1, threads); ++t) {
    workers.threads().emplace_back(encode_worker, std::cref(tokenizer), std::cref(documents),
                                   std::ref(state));
  }
  for (std::size_t index = 0; index < documents.size(); ++index) {
    std::vector<int> ids;
    {
      std::unique_lock lock(state.mutex);
      while (true) {
        if (state.error) std::rethrow_exception(state.error);
        auto ready = state.results.find(index);
        if (ready != state.results.end()) {
          ids = std::move(ready->second);
          state.results.erase(ready);
          break;
        }
        if (state.finished.wait_for(lock, std::chrono::milliseconds(200)) ==
                std::cv_status::timeout &&
            progress) {
          lock.unlock();
          progress(status);
          lock.lock();
        }
      }
    }
    consume(index, ids);
    {
      std::lock_guard lock(state.mutex);
      state.next_to_consume = index + 1;
      state.pending_bytes -= documents[index].size();
    }
    state.can_claim.notify_all();
    status.documents_done = index + 1;
    status.bytes_done += documents[index].size();
    if (progress) progress(status);
  }
}

}  // namespace strata
