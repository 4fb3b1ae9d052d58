// A Communicator between independent jobs (elastic DiLoCo, docs/ARCHITECTURE.md §2 "Elastic
// DiLoCo"): Gloo's TCP transport, its members found through the rendezvous store. One exists per
// membership of a group: when a worker joins or leaves, a new one is made under a new prefix.
//
// Every operation is built here from Gloo's point-to-point transfers (unbound buffers), not from
// Gloo's collectives, so that what crosses each link is what communicator.h's accounting model
// says: the ring all-reduce (reduce-scatter then all-gather over chunks of ⌈count/n⌉), ring
// reduce-scatter and all-gather (uneven chunks as laid out), a flat all-to-all and a broadcast
// that the root sends to each member. Sums are computed once per chunk by the member the ring
// ends at and passed on as bits, so every member holds a bitwise identical result.
//
// Messages between two members travel in order on one Gloo slot; tagged messages
// (start_send/recv_tagged) on a slot of their own per tag. Every call waits at most `timeout`
// for a peer: a member that died mid-call ends it with PeerLost instead of a hang, and the
// communicator is then unusable (its caller makes a new one without the lost member).
//
// With a secret, the constructor ends with the handshake of record_signing.h on every pair (a slot
// of its own, before any collective): each member sends every other a hello, then its proof for
// that peer, and checks the proofs it receives, in the context of the membership's prefix. A peer
// whose proof fails (a process that reached the port without the secret, or in another group)
// is refused: a line on stderr naming it, on both sides, and PeerLost, so that no tensor moves
// on that communicator. The handshake's 92 bytes per pair and direction are connection set-up, not
// counted with the collectives.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/elastic/record_signing.h"
#include "parallel/elastic/rendezvous_store.h"

namespace gloo {
class Context;
}

namespace strata {

// A peer stopped answering (or the link failed) during a call.
class PeerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GlooMembers {
  std::string prefix;  // the store keys of this membership's rendezvous
  int rank = 0, size = 1;
  // Each member's slot in the group (distinct): its "world rank" for the link classes, one
  // worker per slot, so every link of the group is inter-worker.
  std::vector<int> slots;
  std::chrono::milliseconds timeout{60000};
  // The TCP endpoint: a network interface ("eth0", "lo"), or "" for the address the host's name
  // resolves to.
  std::string interface;
  // The group's secret (record_signing.h), or null: then every new pair proves it before any
  // tensor moves (the handshake below).
  std::shared_ptr<const SharedSecret> secret;
};

class GlooCommunicator final : public Communicator {
 public:
  // Collective over the members: each connects to every other through the store (a full mesh of
  // TCP connections). Throws PeerLost when a member does not appear within the timeout. A group
  // of one connects nothing: `store` may then be null.
  GlooCommunicator(RendezvousStore* store, const GlooMembers& members);
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_max(std::int64_t* data, std::size_t count) override;
  void barrier() override;

 private:
  void all_reduce_sum_of(DataType type, void* data, std::size_t count) override;
  void reduce_scatter_sum_of(DataType type, const void* in, void* out,
                             std::size_t count_per_rank) override;
  void all_gather_of(DataType type, const void* in, void* out, std::size_t count_per_rank) override;
  void all_to_all_of(DataType type, const void* in, void* out, std::size_t count_per_rank) override;
  void reduce_scatter_sum_v_of(DataType type, const void* in, void* out,
                               std::span<const std::size_t> counts) override;
  void all_gather_v_of(DataType type, const void* in, void* out,
                       std::span<const std::size_t> counts) override;
  void all_to_all_v_of(DataType type, const void* in, std::span<const std::size_t> send_counts,
                       void* out, std::span<const std::size_t> recv_counts) override;
  std::unique_ptr<PendingCollective> start_all_gather_v_of(
      DataType type, const void* in, void* out, std::span<const std::size_t> counts) override;
  void broadcast_of(DataType type, void* data, std::size_t count, int root) override;
  void send_of(DataType type, const void* data, std::size_t count, int peer) override;
  std::unique_ptr<PendingCollective> start_send_of(DataType type, const void* data,
                                                   std::size_t count, int peer, int tag) override;
  void recv_tagged_of(DataType type, void* data, std::size_t count, int peer, int tag) override;
  void recv_of(DataType type, void* data, std::size_t count, int peer) override;
  void send_recv_of(DataType type, const void* send_buf, std::size_t send_count, int dest,
                    void* recv_buf, std::size_t recv_count, int source) override;

  // The transfers everything above is made of; bytes, on the ordered slot unless tagged.
  struct Transfer;
  std::unique_ptr<Transfer> post_send(const void* data, std::size_t bytes, int peer,
                                      std::uint64_t slot);
  std::unique_ptr<Transfer> post_recv(void* data, std::size_t bytes, int peer, std::uint64_t slot);
  void finish(Transfer& transfer);
  // The ring reduce-scatter of `counts`-sized chunks of `data` (in place): afterwards chunk
  // (rank + shift) mod n of `data` holds the sum over members. `combine` folds a received chunk
  // into the local one.
  void ring_reduce_scatter(DataType type, char* data, std::span<const std::size_t> counts,
                           int shift, bool take_max);
  // The ring all-gather: chunk (r + shift) mod n of member r's `data` reaches every member.
  void ring_all_gather(DataType type, char* data, std::span<const std::size_t> counts, int shift);
  void check_peer(int peer, const char* operation) const;
  // The handshake (above); throws PeerLost naming a peer that fails it.
  void authenticate(const SharedSecret& secret, const std::string& context);

  std::shared_ptr<gloo::Context> context_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
};

}  // namespace strata
