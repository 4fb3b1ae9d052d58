// CommStats arithmetic, the backend-independent byte accounting of communicator.h, and the ring
// step over any backend's point-to-point.
#include "parallel/comm/communicator.h"

#include <functional>
#include <memory>
#include <utility>

#include "model/core/error.h"

namespace strata {

std::uint64_t CommStats::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [kind, by_link] : bytes)
    for (const auto& [link, n] : by_link) total += n;
  return total;
}

double CommStats::total_seconds() const {
  double total = 0;
  for (const auto& [kind, s] : seconds) total += s;
  return total;
}

void CommStats::add(const std::string& kind, LinkClass link, std::uint64_t sent) {
  add_bytes(kind, link, sent);
  count_call(kind);
}

void CommStats::add_bytes(const std::string& kind, LinkClass link, std::uint64_t sent) {
  bytes[kind][link] += sent;
}

void CommStats::count_call(const std::string& kind) { calls[kind] += 1; }

CommStats& CommStats::operator+=(const CommStats& other) {
  for (const auto& [kind, by_link] : other.bytes)
    for (const auto& [link, n] : by_link) bytes[kind][link] += n;
  for (const auto& [kind, n] : other.calls) calls[kind] += n;
  for (const auto& [kind, s] : other.seconds) seconds[kind] += s;
  return *this;
}

CommStats operator-(const CommStats& later, const CommStats& earlier) {
  CommStats difference = later;
  for (const auto& [kind, by_link] : earlier.bytes)
    for (const auto& [link, n] : by_link) {
      STRATA_CHECK(difference.bytes[kind][link] >= n, "CommStats snapshots out of order");
      difference.bytes[kind][link] -= n;
    }
  for (const auto& [kind, n] : earlier.calls) {
    STRATA_CHECK(difference.calls[kind] >= n, "CommStats snapshots out of order");
    difference.calls[kind] -= n;
  }
  for (const auto& [kind, s] : earlier.seconds) difference.seconds[kind] -= s;
  return difference;
}

Communicator::TimedCall::TimedCall(Communicator& owner, const char* kind)
    : owner_(owner), kind_(kind), start_(std::chrono::steady_clock::now()) {}

Communicator::TimedCall::~TimedCall() {
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  owner_.stats_.seconds[kind_] += elapsed.count();
}

std::uint64_t ring_all_reduce_bytes(std::uint64_t bytes, int n) {
  return n <= 1 ? 0 : 2 * bytes * static_cast<std::uint64_t>(n - 1) / static_cast<std::uint64_t>(n);
}

std::uint64_t ring_chunk_bytes(std::uint64_t whole_bytes, int n) {
  return n <= 1 ? 0
                : whole_bytes / static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n - 1);
}

namespace {
std::uint64_t all_but(std::span<const std::size_t> counts, int excluded,
                      std::size_t element_bytes) {
  if (counts.size() <= 1) return 0;
  std::uint64_t total = 0;
  for (std::size_t c : counts) total += c;
  return (total - counts[static_cast<std::size_t>(excluded)]) * element_bytes;
}
}  // namespace

std::uint64_t ring_reduce_scatter_v_bytes(std::span<const std::size_t> counts, int rank,
                                          std::size_t element_bytes) {
  return all_but(counts, rank, element_bytes);
}

std::uint64_t ring_all_gather_v_bytes(std::span<const std::size_t> counts, int rank,
                                      std::size_t element_bytes) {
  const int n = static_cast<int>(counts.size());
  return n <= 1 ? 0 : all_but(counts, (rank + 1) % n, element_bytes);
}

void Communicator::set_topology(std::vector<int> member_world_ranks, int ranks_per_node) {
  STRATA_CHECK(ranks_per_node >= 1, "ranks_per_node must be >= 1");
  member_world_ranks_ = std::move(member_world_ranks);
  ranks_per_node_ = ranks_per_node;
}

int Communicator::world_rank_of(int group_rank) const {
  STRATA_CHECK(group_rank >= 0 && group_rank < static_cast<int>(member_world_ranks_.size()),
               "group rank ", group_rank, " outside a group of ", member_world_ranks_.size());
  return member_world_ranks_[static_cast<std::size_t>(group_rank)];
}

void Communicator::set_ranks_per_worker(int ranks_per_worker) {
  STRATA_CHECK(ranks_per_worker >= 0, "ranks_per_worker must be >= 0");
  ranks_per_worker_ = ranks_per_worker;
}

const char* link_class_name(LinkClass link) {
  switch (link) {
    case LinkClass::intra_node:
      return "intra_node";
    case LinkClass::inter_node:
      return "inter_node";
    case LinkClass::inter_worker:
      return "inter_worker";
  }
  return "?";
}

LinkClass Communicator::link_to(int peer) const {
  if (ranks_per_worker_ > 0 &&
      world_rank_of(rank()) / ranks_per_worker_ != world_rank_of(peer) / ranks_per_worker_)
    return LinkClass::inter_worker;
  const bool same_node =
      world_rank_of(rank()) / ranks_per_node_ == world_rank_of(peer) / ranks_per_node_;
  return same_node ? LinkClass::intra_node : LinkClass::inter_node;
}

void Communicator::count_ring(const std::string& kind, std::uint64_t sent) {
  stats_.add(kind, link_to((rank() + 1) % size()), sent);
}

void Communicator::count_per_peer(const std::string& kind, std::uint64_t bytes_per_peer) {
  for (int peer = 0; peer < size(); ++peer)
    if (peer != rank()) stats_.add_bytes(kind, link_to(peer), bytes_per_peer);
  stats_.count_call(kind);
}

void Communicator::count_to_each_peer(const std::string& kind,
                                      const std::vector<std::uint64_t>& bytes) {
  for (int peer = 0; peer < size(); ++peer)
    if (peer != rank())
      stats_.add_bytes(kind, link_to(peer), bytes.at(static_cast<std::size_t>(peer)));
  stats_.count_call(kind);
}

void Communicator::count_send(int peer, std::uint64_t sent) {
  stats_.add("send", link_to(peer), sent);
}

namespace {
// A pending step whose remaining work is a call made at wait() (or on destruction).
class DeferredCompletion final : public PendingCollective {
 public:
  explicit DeferredCompletion(std::function<void()> finish) : finish_(std::move(finish)) {}
  void wait() override {
    if (!finish_) return;
    const std::function<void()> finish = std::move(finish_);
    finish_ = nullptr;
    finish();
  }
  ~DeferredCompletion() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw: the failure was the transport's, reported there
    }
  }

 private:
  std::function<void()> finish_;
};
}  // namespace

std::unique_ptr<PendingCollective> Communicator::start_ring_shift_of(DataType type,
                                                                     const void* send, void* recv,
                                                                     std::size_t count) {
  const int n = size(), next = (rank() + 1) % n, previous = (rank() + n - 1) % n;
  std::shared_ptr<PendingCollective> sending =
      start_send_of(type, send, count, next, kRingShiftTag);
  return std::make_unique<DeferredCompletion>([this, type, recv, count, previous, sending] {
    recv_tagged_of(type, recv, count, previous, kRingShiftTag);
    sending->wait();
  });
}

}  // namespace strata
