// The collectives a tensor-parallel layer needs inside its group. The model depends only on this
// interface (docs/ARCHITECTURE.md §1: model/ knows nothing of parallel/); parallel::Communicator
// implements it over MPI, and SingleRank below is the group of one process (every call a copy or
// nothing).
//
// Payloads: the element types of model/core/data_type.h (float, double, int8, uint8, int32,
// int64). The typed calls are templates that name the DataType and forward to one type-erased
// virtual per operation, so a backend implements each operation once, not once per type, and a
// type outside the set does not compile. Sums take SummablePayload types only (not the bytes:
// data_type.h says why), so a byte sum is a compile error. Integer sums are exact while the
// result fits; the caller keeps it so (an overflow wraps on every known transport, but none
// promises it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "model/core/data_type.h"

namespace strata {

// A collective started and not yet complete (Collectives::start_ring_shift,
// Communicator::start_all_gather_v). wait() completes it; the buffers it was given must stay alive
// and untouched until then. Destroying it waits.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

// One that completed when it started.
class CompletedCollective final : public PendingCollective {
 public:
  void wait() override {}
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum over the group.
  template <SummablePayload T>
  void all_reduce_sum(T* data, std::size_t count) {
    all_reduce_sum_of(data_type_of<T>(), data, count);
  }
  // In-place element-wise maximum over the group (flags such as "a signal arrived"; the 8-bit
  // optimizer's block scales, whose non-negative float bits order as integers).
  virtual void all_reduce_max(std::int64_t* data, std::size_t count) = 0;
  // out (size·count) = the `in` (count) of every rank, in rank order.
  template <CollectivePayload T>
  void all_gather(const T* in, T* out, std::size_t count) {
    all_gather_of(data_type_of<T>(), in, out, count);
  }
  // out (count) = this rank's chunk of the element-wise sum of every rank's `in` (size·count).
  template <SummablePayload T>
  void reduce_scatter_sum(const T* in, T* out, std::size_t count) {
    reduce_scatter_sum_of(data_type_of<T>(), in, out, count);
  }
  // Uneven all-to-all: `in` holds the chunks for members 0, 1, … (send_counts[r] elements for
  // r), `out` receives the chunks from members 0, 1, … (recv_counts[r] from r), each laid out in
  // rank order; a member's chunk to itself is copied. (Expert parallelism's token exchange.)
  template <CollectivePayload T>
  void all_to_all_v(const T* in, std::span<const std::size_t> send_counts, T* out,
                    std::span<const std::size_t> recv_counts) {
    all_to_all_v_of(data_type_of<T>(), in, send_counts, out, recv_counts);
  }
  // One step of a ring, started now and completed by the result's wait(): `count` elements of
  // `send` to the next member (rank + 1, wrapping) and as many from the previous one into `recv`,
  // so that the transfer can run under the caller's work (ring attention passing K/V blocks,
  // model/context_attention.h). The buffers must not overlap. Counted as "send" when started.
  template <CollectivePayload T>
  std::unique_ptr<PendingCollective> start_ring_shift(const T* send, T* recv, std::size_t count) {
    return start_ring_shift_of(data_type_of<T>(), send, recv, count);
  }

 protected:
  // The typed calls above with the element type as a value; counts are elements of `type`.
  virtual void all_reduce_sum_of(DataType type, void* data, std::size_t count) = 0;
  virtual void all_gather_of(DataType type, const void* in, void* out, std::size_t count) = 0;
  virtual void reduce_scatter_sum_of(DataType type, const void* in, void* out,
                                     std::size_t count) = 0;
  virtual void all_to_all_v_of(DataType type, const void* in,
                               std::span<const std::size_t> send_counts, void* out,
                               std::span<const std::size_t> recv_counts) = 0;
  virtual std::unique_ptr<PendingCollective> start_ring_shift_of(DataType type, const void* send,
                                                                 void* recv, std::size_t count) = 0;
};

// The group of one rank: sums and gathers are copies.
class SingleRank final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_max(std::int64_t*, std::size_t) override {}

 private:
  void all_reduce_sum_of(DataType, void*, std::size_t) override {}
  void all_gather_of(DataType type, const void* in, void* out, std::size_t count) override {
    copy(type, in, out, count);
  }
  void reduce_scatter_sum_of(DataType type, const void* in, void* out, std::size_t count) override {
    copy(type, in, out, count);
  }
  void all_to_all_v_of(DataType type, const void* in, std::span<const std::size_t> send_counts,
                       void* out, std::span<const std::size_t>) override {
    copy(type, in, out, send_counts[0]);
  }
  std::unique_ptr<PendingCollective> start_ring_shift_of(DataType type, const void* send,
                                                         void* recv, std::size_t count) override {
    copy(type, send, recv, count);
    return std::make_unique<CompletedCollective>();
  }
  static void copy(DataType type, const void* in, void* out, std::size_t count) {
    if (in != out && count > 0) std::memcpy(out, in, count * size_of(type));  // empty: maybe null
  }
};

}  // namespace strata
