// The communicator interface (docs/ARCHITECTURE.md §2): collectives and point-to-point messages
// over a group of ranks, every call counted so metrics can report communication by kind and link
// class.
//
// Accounting model (what CommStats holds). Bytes SENT by this rank, per call kind and link class,
// as a ring implementation of each collective would send them; n is the group size, B the bytes
// of the buffer named below (its elements × the element size, whatever the element type):
//   all_reduce      2(n-1)/n · B  B = the buffer (reduce-scatter then all-gather around the ring)
//   reduce_scatter   (n-1)/n · B  B = the whole input, n·count_per_rank elements
//   all_gather       (n-1)/n · B  B = the whole output, n·count_per_rank elements
//   reduce_scatter (uneven)  B − (chunk of this rank)       the ring never sends a member's own
//   all_gather (uneven)      B − (chunk of the successor)   chunk onward (even chunks: as above)
//   all_to_all       (n-1)/n · B  B = the whole input: one chunk to each other member
//   all_to_all (uneven)  the chunks sent to the other members, each on its own link
//   broadcast        (n-1)   · B  B = the buffer, charged to the root (others send nothing)
//   send                       B  also the send half of send_recv; receiving sends nothing
// Link class: a ring collective sends everything to its ring successor (group rank + 1, wrapping),
// so its bytes take the class of that link; a send takes the class of (this rank, peer);
// all_to_all and broadcast are split exactly per peer. A link is intra-node when both ends' world
// ranks fall in the same block of ranks_per_node consecutive world ranks, which is how nodes are
// simulated on one machine (parallel.gpus_per_node); it is inter-worker when the two world ranks
// fall in different blocks of ranks_per_worker (DiLoCo workers; 0: no workers). Every call of a
// counted kind increments calls[kind] once on every member, even when it sends nothing (a 1-rank
// group, a broadcast's non-root); recv, a send_recv without a destination and barrier are not
// counted.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "model/core/collectives.h"

namespace strata {

// inter_worker: between two DiLoCo workers (parallel.diloco.workers blocks of consecutive world
// ranks), whatever the nodes; the slow link DiLoCo is for.
enum class LinkClass { intra_node, inter_node, inter_worker };
// "intra_node" | "inter_node" | "inter_worker" (metrics keys).
const char* link_class_name(LinkClass link);

struct CommStats {
  // kind ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send")
  //   -> link class -> bytes sent by this rank
  std::map<std::string, std::map<LinkClass, std::uint64_t>> bytes;
  std::map<std::string, std::uint64_t> calls;
  // kind (the kinds above, plus "recv") -> wall seconds this rank spent inside such calls,
  // waiting for its peers included: on a pipeline that is mostly bubble, not bandwidth.
  std::map<std::string, double> seconds;

  std::uint64_t total_bytes() const;
  double total_seconds() const;
  // One call that sends `sent` bytes over one link class.
  void add(const std::string& kind, LinkClass link, std::uint64_t sent);
  // The parts of a call that sends over several links: add_bytes per link, count_call once.
  void add_bytes(const std::string& kind, LinkClass link, std::uint64_t sent);
  void count_call(const std::string& kind);
  // Sums another communicator's figures into these (totals over process groups).
  CommStats& operator+=(const CommStats& other);
};

// later − earlier, per kind and link class: the figures of an interval (one training step) from
// two snapshots of running totals. Entries of `later` are kept even where the difference is zero.
CommStats operator-(const CommStats& later, const CommStats& earlier);

// Bytes one rank sends in a ring all-reduce of a `bytes` buffer over n ranks (reduce-scatter then
// all-gather), and in a ring reduce-scatter or all-gather whose whole buffer is `whole_bytes`.
std::uint64_t ring_all_reduce_bytes(std::uint64_t bytes, int n);
std::uint64_t ring_chunk_bytes(std::uint64_t whole_bytes, int n);
// Bytes member `rank` sends in a ring over uneven chunks of `counts` elements of `element_bytes`:
// reduce-scatter (everything but its own chunk) and all-gather (everything but its successor's).
std::uint64_t ring_reduce_scatter_v_bytes(std::span<const std::size_t> counts, int rank,
                                          std::size_t element_bytes);
std::uint64_t ring_all_gather_v_bytes(std::span<const std::size_t> counts, int rank,
                                      std::size_t element_bytes);

// A Collectives, so a tensor-parallel model can run over a group communicator directly.
//
// Payloads are those of Collectives (model/core/data_type.h): every operation below takes float,
// double, int8, uint8, int32 or int64 (sums: all but the bytes) through a typed template, which
// forwards to the backend's one type-erased virtual of that operation (the *_of functions).
// Bytes in the accounting are always elements × size_of(type).
class Communicator : public Collectives {
 public:
  // rank(), size(), all_reduce_sum, all_reduce_max, all_gather and reduce_scatter_sum: see
  // Collectives.
  virtual void barrier() = 0;

  // Root's `data` to every member: `data.size()` elements, or `bytes` raw bytes of any trivially
  // copyable object (an id, a struct of flags), which is a broadcast of uint8. The typed form
  // takes a span so that its element count cannot be mistaken for the byte count of the other.
  template <CollectivePayload T>
  void broadcast(std::span<T> data, int root) {
    broadcast_of(data_type_of<T>(), data.data(), data.size(), root);
  }
  void broadcast(void* data, std::size_t bytes, int root) {
    broadcast_of(DataType::u8, data, bytes, root);
  }

  // Chunked collectives: a buffer of size()·count_per_rank elements is size() chunks, chunk r
  // belonging to group rank r. `in` and `out` must not overlap, except that all_gather may run in
  // place with in == out + rank()·count_per_rank.
  //   reduce_scatter_sum: in (n·count) -> out (count) = sum over members of their chunk rank()
  //   all_gather:         in (count)   -> out (n·count), chunk r = rank r's in
  //   all_to_all:         in (n·count) -> out (n·count), chunk r = rank r's in chunk rank()
  // Uneven chunks: member r's chunk is counts[r] elements (possibly 0), the chunks laid out in rank
  // order, B = Σ counts. Counted as the even kinds ("reduce_scatter", "all_gather").
  //   reduce_scatter_sum_v: in (Σ counts) -> out (counts[rank()]) = sum of every member's chunk
  //   all_gather_v:         in (counts[rank()]) -> out (Σ counts), chunk r = rank r's in
  template <SummablePayload T>
  void reduce_scatter_sum_v(const T* in, T* out, std::span<const std::size_t> counts) {
    reduce_scatter_sum_v_of(data_type_of<T>(), in, out, counts);
  }
  template <CollectivePayload T>
  void all_gather_v(const T* in, T* out, std::span<const std::size_t> counts) {
    all_gather_v_of(data_type_of<T>(), in, out, counts);
  }

  // all_gather_v started now and completed by the result's wait(), so that it overlaps the
  // caller's work (a ZeRO-3 prefetch). Counted when started. Every member starts it at the same
  // point in its sequence of collectives on this group, as for a blocking one.
  template <CollectivePayload T>
  std::unique_ptr<PendingCollective> start_all_gather_v(const T* in, T* out,
                                                        std::span<const std::size_t> counts) {
    return start_all_gather_v_of(data_type_of<T>(), in, out, counts);
  }

  template <CollectivePayload T>
  void all_to_all(const T* in, T* out, std::size_t count_per_rank) {
    all_to_all_of(data_type_of<T>(), in, out, count_per_rank);
  }
  // Uneven all_to_all (Collectives::all_to_all_v) is counted as "all_to_all".

  // Point-to-point with group rank `peer`. Blocking; messages between two ranks arrive in the
  // order they were sent, and a receive names the type and count that were sent. Two ranks that
  // both send first may deadlock once messages outgrow the transport's eager limit: exchanges go
  // through send_recv.
  template <CollectivePayload T>
  void send(const T* data, std::size_t count, int peer) {
    send_of(data_type_of<T>(), data, count, peer);
  }
  template <CollectivePayload T>
  void recv(T* data, std::size_t count, int peer) {
    recv_of(data_type_of<T>(), data, count, peer);
  }
  // Point-to-point that never blocks the sender, for pipeline schedules in which two neighbours
  // may both send first (parallel/pipeline/pipeline_schedule.h): start_send returns at once, and
  // its buffer must stay alive and untouched until the result's wait() (destroying it waits);
  // `tag` (0 <= tag < kMaxMessageTag) names the message between the two ranks, and recv_tagged
  // takes the one from `peer` with that tag, whatever the order they were sent in. Counted as
  // "send" when started (its seconds are the call's, not the transfer's).
  static constexpr int kMaxMessageTag = 32000;  // within MPI's guaranteed tag range
  template <CollectivePayload T>
  std::unique_ptr<PendingCollective> start_send(const T* data, std::size_t count, int peer,
                                                int tag) {
    return start_send_of(data_type_of<T>(), data, count, peer, tag);
  }
  template <CollectivePayload T>
  void recv_tagged(T* data, std::size_t count, int peer, int tag) {
    recv_tagged_of(data_type_of<T>(), data, count, peer, tag);
  }
  // Sends to `dest` and receives from `source` as one paired operation, so neighbours in a ring
  // or pipeline (1F1B) can exchange without ordering their calls. dest or source -1 means none
  // (a first or last pipeline stage); recv_buf is then left untouched and may be null. The type
  // is taken from send_buf alone, so a null recv_buf still compiles.
  template <CollectivePayload T>
  void send_recv(const T* send_buf, std::size_t send_count, int dest,
                 std::type_identity_t<T>* recv_buf, std::size_t recv_count, int source) {
    send_recv_of(data_type_of<T>(), send_buf, send_count, dest, recv_buf, recv_count, source);
  }

  // The world rank of group member `group_rank`, and the class of a link from this rank to it.
  int world_rank_of(int group_rank) const;
  LinkClass link_to(int peer) const;
  int ranks_per_node() const { return ranks_per_node_; }
  int ranks_per_worker() const { return ranks_per_worker_; }
  // DiLoCo: world ranks in different blocks of `ranks_per_worker` are joined by inter-worker
  // links. Set on the world communicator before its subgroups are made (they inherit it).
  void set_ranks_per_worker(int ranks_per_worker);

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // For a device backend that runs this group's collectives on device memory (NCCL): counts them
  // in these stats by the model above, as this communicator counts its own calls. Their seconds
  // are not counted: a device call returns before its transfer is done.
  void count_device_ring(const std::string& kind, std::uint64_t sent) { count_ring(kind, sent); }
  void count_device_send(int peer, std::uint64_t sent) { count_send(peer, sent); }

 protected:
  // The type-erased operations behind the templates above (counts are elements of `type`).
  virtual void broadcast_of(DataType type, void* data, std::size_t count, int root) = 0;
  virtual void all_to_all_of(DataType type, const void* in, void* out,
                             std::size_t count_per_rank) = 0;
  virtual void reduce_scatter_sum_v_of(DataType type, const void* in, void* out,
                                       std::span<const std::size_t> counts) = 0;
  virtual void all_gather_v_of(DataType type, const void* in, void* out,
                               std::span<const std::size_t> counts) = 0;
  virtual std::unique_ptr<PendingCollective> start_all_gather_v_of(
      DataType type, const void* in, void* out, std::span<const std::size_t> counts) = 0;
  virtual void send_of(DataType type, const void* data, std::size_t count, int peer) = 0;
  virtual void recv_of(DataType type, void* data, std::size_t count, int peer) = 0;
  virtual std::unique_ptr<PendingCollective> start_send_of(DataType type, const void* data,
                                                           std::size_t count, int peer,
                                                           int tag) = 0;
  virtual void recv_tagged_of(DataType type, void* data, std::size_t count, int peer, int tag) = 0;
  // Collectives' ring step over this backend's point-to-point: start_send to the next member now,
  // recv_tagged from the previous one at wait() (tag kRingShiftTag). A backend that can post its
  // receive up front (MPI) overrides it so that the transfer runs under the caller's work.
  std::unique_ptr<PendingCollective> start_ring_shift_of(DataType type, const void* send,
                                                         void* recv, std::size_t count) override;
  static constexpr int kRingShiftTag = kMaxMessageTag - 1;  // no pipeline message uses it
  virtual void send_recv_of(DataType type, const void* send_buf, std::size_t send_count, int dest,
                            void* recv_buf, std::size_t recv_count, int source) = 0;

  // A backend calls this once it knows its group: every member's world rank, in group-rank order.
  void set_topology(std::vector<int> member_world_ranks, int ranks_per_node);

  // Accounting helpers implementing the model above; each counts one call of `kind`.
  // A ring collective sending `sent` bytes to the ring successor.
  void count_ring(const std::string& kind, std::uint64_t sent);
  // `bytes_per_peer` to every other member (all_to_all; broadcast at its root).
  void count_per_peer(const std::string& kind, std::uint64_t bytes_per_peer);
  // bytes[p] to each other member p (uneven all_to_all).
  void count_to_each_peer(const std::string& kind, const std::vector<std::uint64_t>& bytes);
  // `sent` bytes to `peer`, as kind "send".
  void count_send(int peer, std::uint64_t sent);

  // Adds the wall time from its construction to its end to stats().seconds[kind].
  class TimedCall {
   public:
    TimedCall(Communicator& owner, const char* kind);
    ~TimedCall();
    TimedCall(const TimedCall&) = delete;
    TimedCall& operator=(const TimedCall&) = delete;

   private:
    Communicator& owner_;
    const char* kind_;
    std::chrono::steady_clock::time_point start_;
  };

  CommStats stats_;

 private:
  std::vector<int> member_world_ranks_;
  int ranks_per_node_ = 1;
  int ranks_per_worker_ = 0;
};

}  // namespace strata
