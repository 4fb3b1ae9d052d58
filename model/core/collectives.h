// The collectives a tensor-parallel layer needs inside its group. The model depends only on this
// interface (DESIGN §1: model/ knows nothing of parallel/); parallel::Communicator implements it
// over MPI or NCCL, and SingleRank below is the group of one process (every call a no-op).
#pragma once

#include <cstddef>
#include <cstring>

namespace strata {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum over the group.
  virtual void all_reduce_sum(float* data, std::size_t count) = 0;
  virtual void all_reduce_sum(double* data, std::size_t count) = 0;
  // out (size·count) = the `in` (count) of every rank, in rank order.
  virtual void all_gather(const float* in, float* out, std::size_t count) = 0;
  virtual void all_gather(const double* in, double* out, std::size_t count) = 0;
  // out (count) = this rank's chunk of the element-wise sum of every rank's `in` (size·count).
  virtual void reduce_scatter_sum(const float* in, float* out, std::size_t count) = 0;
  virtual void reduce_scatter_sum(const double* in, double* out, std::size_t count) = 0;
};

// The group of one rank: sums and gathers are copies.
class SingleRank final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, std::size_t) override {}
  void all_reduce_sum(double*, std::size_t) override {}
  void all_gather(const float* in, float* out, std::size_t count) override { copy(in, out, count); }
  void all_gather(const double* in, double* out, std::size_t count) override {
    copy(in, out, count);
  }
  void reduce_scatter_sum(const float* in, float* out, std::size_t count) override {
    copy(in, out, count);
  }
  void reduce_scatter_sum(const double* in, double* out, std::size_t count) override {
    copy(in, out, count);
  }

 private:
  template <class T>
  static void copy(const T* in, T* out, std::size_t count) {
    if (in != out) std::memcpy(out, in, count * sizeof(T));
  }
};

}  // namespace strata
