#include "parallel/elastic/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "model/core/error.h"

namespace strata {

namespace {

// Gloo's rendezvous reads the store through its own interface: a key's get waits until some
// member has set it (Gloo's stores block the same way).
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(RendezvousStore& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    return store_.get(key).value_or(std::vector<char>{});
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& key : keys)
      while (!store_.get(key)) {
        if (std::chrono::steady_clock::now() > deadline)
          throw PeerLost("no member of the Gloo group published '" + key + "' within " +
                         std::to_string(timeout.count() / 1000) + " s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
  }

 private:
  RendezvousStore& store_;
  std::chrono::milliseconds timeout_;
};

// Ordered messages between two members share one slot (Gloo keeps a pair's messages on a slot in
// order); a tagged message takes slot kTaggedSlot + tag.
constexpr std::uint64_t kHandshakeSlot = 0;
constexpr std::uint64_t kOrderedSlot = 1;
constexpr std::uint64_t kTaggedSlot = 2;

std::uint64_t bytes_of(DataType type, std::size_t count) { return count * size_of(type); }

// out[i] += in[i] (or max) over `count` elements of `type`.
void combine(DataType type, char* out, const char* in, std::size_t count, bool take_max) {
  STRATA_CHECK(summable(type), "bytes are never summed");
  visit_data_type(type, [&](auto zero) {
    using T = decltype(zero);
    T* o = reinterpret_cast<T*>(out);
    const T* x = reinterpret_cast<const T*>(in);
    for (std::size_t i = 0; i < count; ++i) o[i] = take_max ? std::max(o[i], x[i]) : o[i] + x[i];
  });
}

// Even chunks of a ring all-reduce: ⌈count/n⌉ each, the last ones short or empty.
std::vector<std::size_t> even_chunks(std::size_t count, int n) {
  const std::size_t width = (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
  std::vector<std::size_t> counts;
  for (int r = 0; r < n; ++r) {
    const std::size_t begin = std::min(count, static_cast<std::size_t>(r) * width);
    counts.push_back(std::min(count, begin + width) - begin);
  }
  return counts;
}

std::vector<std::size_t> offsets_of(std::span<const std::size_t> counts) {
  std::vector<std::size_t> offsets(counts.size() + 1, 0);
  for (std::size_t r = 0; r < counts.size(); ++r) offsets[r + 1] = offsets[r] + counts[r];
  return offsets;
}

int wrap(int r, int n) { return ((r % n) + n) % n; }

// Runs a Gloo call; its failures become PeerLost("<what>: <reason>"): Gloo's I/O errors, and its
// state checks (GLOO_ENFORCE, not a gloo::Exception) that a pair whose peer died can trip.
template <class Call>
void lost_on_failure(const std::string& what, Call&& call) {
  try {
    call();
  } catch (const gloo::Exception& e) {
    throw PeerLost(what + ": " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw PeerLost(what + ": " + e.what());
  }
}

}  // namespace

struct GlooCommunicator::Transfer {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool sending = false;
  int peer = 0;
};

GlooCommunicator::GlooCommunicator(RendezvousStore* store, const GlooMembers& members)
    : rank_(members.rank), size_(members.size), timeout_(members.timeout) {
  STRATA_CHECK(members.size >= 1 && members.rank >= 0 && members.rank < members.size &&
                   static_cast<int>(members.slots.size()) == members.size,
               "Gloo group: rank ", members.rank, " of ", members.size, " with ",
               members.slots.size(), " slots");
  set_topology(members.slots, 1);
  set_ranks_per_worker(1);
  if (size_ == 1) return;
  STRATA_CHECK(store != nullptr, "a Gloo group of ", size_, " needs the rendezvous store");
  gloo::transport::tcp::attr attr;
  if (!members.interface.empty()) attr.iface = members.interface;
  lost_on_failure("Gloo could not connect the group", [&] {
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    GlooStore adapter(*store, timeout_);
    gloo::rendezvous::PrefixStore prefixed(members.prefix, adapter);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(timeout_);
    context->connectFullMesh(prefixed, device);
    context_ = std::move(context);
  });
  if (members.secret) authenticate(*members.secret, members.prefix);
}

void GlooCommunicator::authenticate(const SharedSecret& secret, const std::string& context) {
  // Every peer's message of one kind, sent and received at once on the handshake slot.
  const auto exchange = [&](const std::vector<HandshakeMessage>& out) {
    std::vector<HandshakeMessage> in(static_cast<std::size_t>(size_));
    std::vector<std::unique_ptr<Transfer>> transfers;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const auto i = static_cast<std::size_t>(q);
      transfers.push_back(post_recv(in[i].data(), in[i].size(), q, kHandshakeSlot));
      transfers.push_back(post_send(out[i].data(), out[i].size(), q, kHandshakeSlot));
    }
    for (auto& t : transfers) finish(*t);
    return in;
  };
  const auto refuse = [&](int q, const char* why) {
    std::fprintf(stderr,
                 "error: member %d of the group '%s' %s: refused (it lacks this group's secret, "
                 "or belongs to another group)\n",
                 q, context.c_str(), why);
    throw PeerLost("member " + std::to_string(q) + " failed the secret's challenge (" + why + ")");
  };
  const HandshakeNonce mine = random_nonce();
  const std::vector<HandshakeMessage> hellos = exchange(
      std::vector<HandshakeMessage>(static_cast<std::size_t>(size_), handshake_hello(mine)));
  std::vector<HandshakeNonce> theirs(static_cast<std::size_t>(size_));
  std::vector<HandshakeMessage> proofs(static_cast<std::size_t>(size_));
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto i = static_cast<std::size_t>(q);
    const std::optional<HandshakeNonce> nonce = parse_hello(hellos[i]);
    if (!nonce) refuse(q, "sent no hello");
    theirs[i] = *nonce;
    proofs[i] = handshake_proof(secret, context, rank_, q, mine, theirs[i]);
  }
  const std::vector<HandshakeMessage> received = exchange(proofs);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto i = static_cast<std::size_t>(q);
    if (!check_proof(secret, context, q, rank_, theirs[i], mine, received[i]))
      refuse(q, "failed the secret's challenge");
  }
}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::check_peer(int peer, const char* operation) const {
  if (peer < 0 || peer >= size_)
    fail(operation, ": peer ", peer, " is not a rank of a group of ", size_);
}

std::unique_ptr<GlooCommunicator::Transfer> GlooCommunicator::post_send(const void* data,
                                                                        std::size_t bytes, int peer,
                                                                        std::uint64_t slot) {
  auto transfer = std::make_unique<Transfer>();
  transfer->sending = true;
  transfer->peer = peer;
  if (bytes == 0) return transfer;
  lost_on_failure("Gloo send to member " + std::to_string(peer), [&] {
    // Gloo's buffers are not const; a send only reads it.
    transfer->buffer = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
    transfer->buffer->send(peer, slot);
  });
  return transfer;
}

std::unique_ptr<GlooCommunicator::Transfer> GlooCommunicator::post_recv(void* data,
                                                                        std::size_t bytes, int peer,
                                                                        std::uint64_t slot) {
  auto transfer = std::make_unique<Transfer>();
  transfer->peer = peer;
  if (bytes == 0) return transfer;
  lost_on_failure("Gloo receive from member " + std::to_string(peer), [&] {
    transfer->buffer = context_->createUnboundBuffer(data, bytes);
    transfer->buffer->recv(peer, slot);
  });
  return transfer;
}

void GlooCommunicator::finish(Transfer& transfer) {
  if (!transfer.buffer) return;
  bool done = false;
  lost_on_failure("Gloo transfer with member " + std::to_string(transfer.peer) + " failed", [&] {
    done = transfer.sending ? transfer.buffer->waitSend(timeout_)
                            : transfer.buffer->waitRecv(timeout_);
  });
  if (!done)
    throw PeerLost("Gloo transfer with member " + std::to_string(transfer.peer) + " was aborted");
  transfer.buffer.reset();
}

void GlooCommunicator::ring_reduce_scatter(DataType type, char* data,
                                           std::span<const std::size_t> counts, int shift,
                                           bool take_max) {
  const int n = size_, next = wrap(rank_ + 1, n), prev = wrap(rank_ - 1, n);
  const std::size_t element = size_of(type);
  const std::vector<std::size_t> at = offsets_of(counts);
  const std::size_t widest = *std::max_element(counts.begin(), counts.end());
  std::vector<char> incoming(widest * element);
  // Step s sends chunk (r + shift − s − 1) and folds in chunk (r + shift − s − 2) from the
  // predecessor, so the last step completes chunk r + shift.
  for (int s = 0; s + 1 < n; ++s) {
    const auto out = static_cast<std::size_t>(wrap(rank_ + shift - s - 1, n));
    const auto in = static_cast<std::size_t>(wrap(rank_ + shift - s - 2, n));
    auto receive = post_recv(incoming.data(), counts[in] * element, prev, kOrderedSlot);
    auto send = post_send(data + at[out] * element, counts[out] * element, next, kOrderedSlot);
    finish(*receive);
    finish(*send);
    combine(type, data + at[in] * element, incoming.data(), counts[in], take_max);
  }
}

void GlooCommunicator::ring_all_gather(DataType type, char* data,
                                       std::span<const std::size_t> counts, int shift) {
  const int n = size_, next = wrap(rank_ + 1, n), prev = wrap(rank_ - 1, n);
  const std::size_t element = size_of(type);
  const std::vector<std::size_t> at = offsets_of(counts);
  // Step s passes on chunk (r + shift − s), the one received in the step before.
  for (int s = 0; s + 1 < n; ++s) {
    const auto out = static_cast<std::size_t>(wrap(rank_ + shift - s, n));
    const auto in = static_cast<std::size_t>(wrap(rank_ + shift - s - 1, n));
    auto receive = post_recv(data + at[in] * element, counts[in] * element, prev, kOrderedSlot);
    auto send = post_send(data + at[out] * element, counts[out] * element, next, kOrderedSlot);
    finish(*receive);
    finish(*send);
  }
}

void GlooCommunicator::all_reduce_sum_of(DataType type, void* data, std::size_t count) {
  const TimedCall timed(*this, "all_reduce");
  if (size_ > 1) {
    const std::vector<std::size_t> counts = even_chunks(count, size_);
    // After the reduce-scatter member r holds chunk r + 1 whole, which the all-gather spreads.
    ring_reduce_scatter(type, static_cast<char*>(data), counts, 1, false);
    ring_all_gather(type, static_cast<char*>(data), counts, 1);
  }
  count_ring("all_reduce", ring_all_reduce_bytes(bytes_of(type, count), size_));
}

void GlooCommunicator::all_reduce_max(std::int64_t* data, std::size_t count) {
  const TimedCall timed(*this, "all_reduce");
  if (size_ > 1) {
    const std::vector<std::size_t> counts = even_chunks(count, size_);
    ring_reduce_scatter(DataType::i64, reinterpret_cast<char*>(data), counts, 1, true);
    ring_all_gather(DataType::i64, reinterpret_cast<char*>(data), counts, 1);
  }
  count_ring("all_reduce", ring_all_reduce_bytes(count * sizeof(std::int64_t), size_));
}

void GlooCommunicator::barrier() {
  // A token around the ring twice: nobody leaves before everybody arrived. Not counted, as
  // MpiCommunicator's barrier is not.
  if (size_ == 1) return;
  const int next = wrap(rank_ + 1, size_), prev = wrap(rank_ - 1, size_);
  std::uint8_t token = 0;
  for (int lap = 0; lap < 2; ++lap) {
    if (rank_ != 0) finish(*post_recv(&token, 1, prev, kOrderedSlot));
    finish(*post_send(&token, 1, next, kOrderedSlot));
    if (rank_ == 0) finish(*post_recv(&token, 1, prev, kOrderedSlot));
  }
}

void GlooCommunicator::reduce_scatter_sum_of(DataType type, const void* in, void* out,
                                             std::size_t count_per_rank) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), count_per_rank);
  reduce_scatter_sum_v_of(type, in, out, counts);
}

void GlooCommunicator::reduce_scatter_sum_v_of(DataType type, const void* in, void* out,
                                               std::span<const std::size_t> counts) {
  const TimedCall timed(*this, "reduce_scatter");
  STRATA_CHECK(static_cast<int>(counts.size()) == size_, "uneven collective: ", counts.size(),
               " counts for a group of ", size_);
  const std::vector<std::size_t> at = offsets_of(counts);
  const std::size_t element = size_of(type);
  std::vector<char> work(static_cast<const char*>(in),
                         static_cast<const char*>(in) + at.back() * element);
  if (size_ > 1) ring_reduce_scatter(type, work.data(), counts, 0, false);
  const auto own = static_cast<std::size_t>(rank_);
  if (counts[own] > 0) std::memcpy(out, work.data() + at[own] * element, counts[own] * element);
  count_ring("reduce_scatter", ring_reduce_scatter_v_bytes(counts, rank_, element));
}

void GlooCommunicator::all_gather_of(DataType type, const void* in, void* out,
                                     std::size_t count_per_rank) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), count_per_rank);
  all_gather_v_of(type, in, out, counts);
}

void GlooCommunicator::all_gather_v_of(DataType type, const void* in, void* out,
                                       std::span<const std::size_t> counts) {
  const TimedCall timed(*this, "all_gather");
  STRATA_CHECK(static_cast<int>(counts.size()) == size_, "uneven collective: ", counts.size(),
               " counts for a group of ", size_);
  const std::vector<std::size_t> at = offsets_of(counts);
  const std::size_t element = size_of(type);
  const auto own = static_cast<std::size_t>(rank_);
  char* mine = static_cast<char*>(out) + at[own] * element;
  if (counts[own] > 0 && in != mine) std::memmove(mine, in, counts[own] * element);
  if (size_ > 1) ring_all_gather(type, static_cast<char*>(out), counts, 0);
  count_ring("all_gather", ring_all_gather_v_bytes(counts, rank_, element));
}

std::unique_ptr<PendingCollective> GlooCommunicator::start_all_gather_v_of(
    DataType type, const void* in, void* out, std::span<const std::size_t> counts) {
  // Between jobs nothing overlaps a gather (ZeRO-3 prefetches run inside a job): it runs now.
  all_gather_v_of(type, in, out, counts);
  return std::make_unique<CompletedCollective>();
}

void GlooCommunicator::all_to_all_of(DataType type, const void* in, void* out,
                                     std::size_t count_per_rank) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), count_per_rank);
  all_to_all_v_of(type, in, counts, out, counts);
}

void GlooCommunicator::all_to_all_v_of(DataType type, const void* in,
                                       std::span<const std::size_t> send_counts, void* out,
                                       std::span<const std::size_t> recv_counts) {
  const TimedCall timed(*this, "all_to_all");
  STRATA_CHECK(static_cast<int>(send_counts.size()) == size_ &&
                   static_cast<int>(recv_counts.size()) == size_,
               "uneven all_to_all: counts for a group of ", size_);
  const std::size_t element = size_of(type);
  const std::vector<std::size_t> send_at = offsets_of(send_counts),
                                 recv_at = offsets_of(recv_counts);
  const auto own = static_cast<std::size_t>(rank_);
  STRATA_CHECK(send_counts[own] == recv_counts[own], "all_to_all: own chunk sizes differ");
  if (send_counts[own] > 0)
    std::memcpy(static_cast<char*>(out) + recv_at[own] * element,
                static_cast<const char*>(in) + send_at[own] * element, send_counts[own] * element);
  std::vector<std::unique_ptr<Transfer>> transfers;
  std::vector<std::uint64_t> bytes;
  for (int p = 0; p < size_; ++p) {
    const auto q = static_cast<std::size_t>(p);
    bytes.push_back(p == rank_ ? 0 : bytes_of(type, send_counts[q]));
    if (p == rank_) continue;
    transfers.push_back(post_recv(static_cast<char*>(out) + recv_at[q] * element,
                                  recv_counts[q] * element, p, kOrderedSlot));
    transfers.push_back(post_send(static_cast<const char*>(in) + send_at[q] * element,
                                  send_counts[q] * element, p, kOrderedSlot));
  }
  for (auto& t : transfers) finish(*t);
  count_to_each_peer("all_to_all", bytes);
}

void GlooCommunicator::broadcast_of(DataType type, void* data, std::size_t count, int root) {
  const TimedCall timed(*this, "broadcast");
  check_peer(root, "broadcast");
  const std::uint64_t bytes = bytes_of(type, count);
  if (rank_ == root) {
    std::vector<std::unique_ptr<Transfer>> sends;
    for (int p = 0; p < size_; ++p)
      if (p != root) sends.push_back(post_send(data, bytes, p, kOrderedSlot));
    for (auto& s : sends) finish(*s);
    count_per_peer("broadcast", bytes);
  } else {
    finish(*post_recv(data, bytes, root, kOrderedSlot));
    stats_.count_call("broadcast");
  }
}

void GlooCommunicator::send_of(DataType type, const void* data, std::size_t count, int peer) {
  const TimedCall timed(*this, "send");
  check_peer(peer, "send");
  finish(*post_send(data, bytes_of(type, count), peer, kOrderedSlot));
  count_send(peer, bytes_of(type, count));
}

void GlooCommunicator::recv_of(DataType type, void* data, std::size_t count, int peer) {
  const TimedCall timed(*this, "recv");
  check_peer(peer, "recv");
  finish(*post_recv(data, bytes_of(type, count), peer, kOrderedSlot));
}

namespace {
class PendingSend final : public PendingCollective {
 public:
  explicit PendingSend(std::function<void()> finish) : finish_(std::move(finish)) {}
  void wait() override {
    if (finish_) std::exchange(finish_, nullptr)();
  }
  ~PendingSend() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw; the caller's wait() reports the failure
    }
  }

 private:
  std::function<void()> finish_;
};
}  // namespace

std::unique_ptr<PendingCollective> GlooCommunicator::start_send_of(DataType type, const void* data,
                                                                   std::size_t count, int peer,
                                                                   int tag) {
  const TimedCall timed(*this, "send");
  check_peer(peer, "send");
  STRATA_CHECK(tag >= 0 && tag < kMaxMessageTag, "message tag ", tag, " out of range");
  std::shared_ptr<Transfer> transfer =
      post_send(data, bytes_of(type, count), peer, kTaggedSlot + static_cast<std::uint64_t>(tag));
  count_send(peer, bytes_of(type, count));
  return std::make_unique<PendingSend>([this, transfer] { finish(*transfer); });
}

void GlooCommunicator::recv_tagged_of(DataType type, void* data, std::size_t count, int peer,
                                      int tag) {
  const TimedCall timed(*this, "recv");
  check_peer(peer, "recv");
  STRATA_CHECK(tag >= 0 && tag < kMaxMessageTag, "message tag ", tag, " out of range");
  finish(
      *post_recv(data, bytes_of(type, count), peer, kTaggedSlot + static_cast<std::uint64_t>(tag)));
}

void GlooCommunicator::send_recv_of(DataType type, const void* send_buf, std::size_t send_count,
                                    int dest, void* recv_buf, std::size_t recv_count, int source) {
  const TimedCall timed(*this, "send");
  if (dest != -1) check_peer(dest, "send_recv");
  if (source != -1) check_peer(source, "send_recv");
  std::unique_ptr<Transfer> receive, send;
  if (source != -1) receive = post_recv(recv_buf, bytes_of(type, recv_count), source, kOrderedSlot);
  if (dest != -1) send = post_send(send_buf, bytes_of(type, send_count), dest, kOrderedSlot);
  if (receive) finish(*receive);
  if (send) finish(*send);
  if (dest != -1) count_send(dest, bytes_of(type, send_count));
}

}  // namespace strata
