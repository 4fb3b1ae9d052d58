// A tensor-parallel group of std::threads in one process, for tests: each thread is a rank and
// holds a ThreadRank (Collectives). Every collective publishes the caller's buffer, waits for all
// ranks, and combines in rank order, so every rank gets bitwise the same result (as MPI does).
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "model/core/collectives.h"

namespace strata::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), sync_(size), published_(size), counts_(size) {}
  int size() const { return size_; }

  // Runs body(rank) on `size` threads and joins them.
  void run(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

 private:
  friend class ThreadRank;
  int size_;
  std::barrier<> sync_;
  std::vector<const void*> published_;
  std::vector<std::span<const std::size_t>> counts_;
};

class ThreadRank final : public Collectives {
 public:
  ThreadRank(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void all_reduce_max(std::int64_t* d, std::size_t n) override {
    reduce(d, d, n, 0, [](std::int64_t a, std::int64_t b) { return a > b ? a : b; });
  }

 private:
  void all_reduce_sum_of(DataType type, void* d, std::size_t n) override {
    visit_data_type(type, [&](auto zero) {
      using T = decltype(zero);
      reduce(static_cast<const T*>(d), static_cast<T*>(d), n, 0);
    });
  }
  void all_gather_of(DataType type, const void* in, void* out, std::size_t n) override {
    gather(in, out, n * size_of(type));
  }
  void reduce_scatter_sum_of(DataType type, const void* in, void* out, std::size_t n) override {
    visit_data_type(type, [&](auto zero) {
      using T = decltype(zero);
      reduce(static_cast<const T*>(in), static_cast<T*>(out), n, n * rank_);
    });
  }
  // out (count) = in_r[first .. first+count) combined over r in rank order (a sum by default).
  template <class T, class Combine = std::plus<T>>
  void reduce(const T* in, T* out, std::size_t count, std::size_t first, Combine combine = {}) {
    group_.published_[rank_] = in;
    group_.sync_.arrive_and_wait();
    std::vector<T> sum(static_cast<const T*>(group_.published_[0]) + first,
                       static_cast<const T*>(group_.published_[0]) + first + count);
    for (int r = 1; r < size(); ++r) {
      const T* src = static_cast<const T*>(group_.published_[r]) + first;
      for (std::size_t i = 0; i < count; ++i) sum[i] = combine(sum[i], src[i]);
    }
    group_.sync_.arrive_and_wait();  // every rank has read every input before any is overwritten
    std::memcpy(out, sum.data(), count * sizeof(T));
    group_.sync_.arrive_and_wait();
  }
  void all_to_all_v_of(DataType type, const void* in, std::span<const std::size_t> send_counts,
                       void* out, std::span<const std::size_t> recv_counts) override {
    group_.published_[rank_] = in;
    group_.counts_[rank_] = send_counts;
    group_.sync_.arrive_and_wait();
    char* to = static_cast<char*>(out);
    for (int r = 0; r < size(); ++r) {
      const std::span<const std::size_t> theirs = group_.counts_[r];
      std::size_t before = 0;
      for (int q = 0; q < rank_; ++q) before += theirs[q];
      const std::size_t bytes = recv_counts[r] * size_of(type);
      if (bytes > 0)  // an empty chunk's buffer may be null
        std::memcpy(to, static_cast<const char*>(group_.published_[r]) + before * size_of(type),
                    bytes);
      to += bytes;
    }
    group_.sync_.arrive_and_wait();
  }
  // Completed at once: the previous rank's buffer copied once every rank has published its own.
  std::unique_ptr<PendingCollective> start_ring_shift_of(DataType type, const void* send,
                                                         void* recv, std::size_t count) override {
    group_.published_[rank_] = send;
    group_.sync_.arrive_and_wait();
    const int previous = (rank_ + size() - 1) % size();
    if (count > 0) std::memcpy(recv, group_.published_[previous], count * size_of(type));
    group_.sync_.arrive_and_wait();
    return std::make_unique<CompletedCollective>();
  }
  // out (size·bytes) = every rank's `in` (bytes), in rank order.
  void gather(const void* in, void* out, std::size_t bytes) {
    group_.published_[rank_] = in;
    group_.sync_.arrive_and_wait();
    for (int r = 0; r < size(); ++r)
      std::memcpy(static_cast<char*>(out) + r * bytes, group_.published_[r], bytes);
    group_.sync_.arrive_and_wait();
  }

  ThreadGroup& group_;
  int rank_;
};

}  // namespace strata::testing
