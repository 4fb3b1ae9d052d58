// A tensor-parallel group of std::threads in one process, for tests: each thread is a rank and
// holds a ThreadRank (Collectives). Every collective publishes the caller's buffer, waits for all
// ranks, and combines in rank order, so every rank gets bitwise the same result (as MPI does).
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "model/core/collectives.h"

namespace strata::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), sync_(size), published_(size) {}
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
};

class ThreadRank final : public Collectives {
 public:
  ThreadRank(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void all_reduce_sum(float* d, std::size_t n) override { reduce(d, d, n, n, 0); }
  void all_reduce_sum(double* d, std::size_t n) override { reduce(d, d, n, n, 0); }
  void all_gather(const float* in, float* out, std::size_t n) override { gather(in, out, n); }
  void all_gather(const double* in, double* out, std::size_t n) override { gather(in, out, n); }
  void reduce_scatter_sum(const float* in, float* out, std::size_t n) override {
    reduce(in, out, n * size(), n, n * rank_);
  }
  void reduce_scatter_sum(const double* in, double* out, std::size_t n) override {
    reduce(in, out, n * size(), n, n * rank_);
  }

 private:
  // out (count) = Σ_r in_r[first .. first+count), summed in rank order; in has `total` elements.
  template <class T>
  void reduce(const T* in, T* out, std::size_t total, std::size_t count, std::size_t first) {
    (void)total;
    group_.published_[rank_] = in;
    group_.sync_.arrive_and_wait();
    std::vector<T> sum(count, T(0));
    for (int r = 0; r < size(); ++r) {
      const T* src = static_cast<const T*>(group_.published_[r]) + first;
      for (std::size_t i = 0; i < count; ++i) sum[i] += src[i];
    }
    group_.sync_.arrive_and_wait();  // every rank has read every input before any is overwritten
    std::memcpy(out, sum.data(), count * sizeof(T));
    group_.sync_.arrive_and_wait();
  }
  template <class T>
  void gather(const T* in, T* out, std::size_t count) {
    group_.published_[rank_] = in;
    group_.sync_.arrive_and_wait();
    for (int r = 0; r < size(); ++r)
      std::memcpy(out + r * count, group_.published_[r], count * sizeof(T));
    group_.sync_.arrive_and_wait();
  }

  ThreadGroup& group_;
  int rank_;
};

}  // namespace strata::testing
