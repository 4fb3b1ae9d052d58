// Context parallelism's attention (docs/ARCHITECTURE.md §2, "Context parallelism"): the cp
// members of a group each hold 2 of the 2·cp equal chunks of every sequence, member r chunks r and
// 2·cp − 1 − r (in that order in its rows: Megatron's causal load balance, every member then
// attends to the same number of key rows), and attention is the one op that needs the others'
// rows. Each member attends its two query chunks to every key chunk at or before them, chunk pair
// by chunk pair (the ops' attention_pair_forward, with the causal offset between the chunks'
// positions), and merges the partial outputs by their log-sum-exps (attention_merge). The
// backward pass runs the same pairs with the merged rows' lse and D = rowsum(dout ⊙ out), adding
// dQ locally and dK/dV into the key chunks' owners' gradients.
//
// The K/V blocks (a member's two chunks' k and v columns, (B, 2·Tc, 2·KV·hs)) travel one of two
// ways (parallel.cp_comm):
//   ring        each member passes the block it holds to the next member and attends to it while
//               the next one arrives (the ops' group_ring_shift), cp − 1 steps; the backward
//               pass sends the K/V blocks around again the same way (cp − 1 steps), and after
//               each step the dK/dV of the block just attended follow it to the next member (cp
//               hops, not overlapped with the attention: the last brings each member's gradients
//               home).
//   all_gather  the blocks are gathered at once (forward and again in the backward pass), and the
//               gradients of every block are reduce-scattered to their owners.
// Both visit the blocks in the same order (the member's own, then those of members r − 1, r − 2,
// …), so their outputs, lse and dQ are the same bit for bit; dK and dV are summed in other orders
// (along the ring; each member's part apart, then reduce-scattered), equal to rounding. They
// differ in memory (ring: two blocks, and two gradient blocks in the backward; all_gather: cp of
// each, and cp gradient blocks) and in when the bytes move.
//
// Bytes one member sends, X = B · 2·Tc · 2·KV·hs · sizeof(Value) (its K/V block; T = 2·cp·Tc):
//   forward   ring (cp − 1)·X as "send";  all_gather (cp − 1)·X as "all_gather"
//   backward  ring (2·cp − 1)·X as "send" ((cp − 1)·X of K/V, cp·X of dK/dV);
//             all_gather (cp − 1)·X as "all_gather" and (cp − 1)·X as "reduce_scatter"
// (context_attention_bytes below; the communicator's counts equal them, tests/mpi/
// context_attention_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "model/core/collectives.h"
#include "model/core/context_chunks.h"
#include "model/core/error.h"
#include "model/ops/ops.h"

namespace strata {

// The bytes of the header's table for one attention call of one member; `backward` selects the
// direction.
inline std::uint64_t context_attention_bytes(ContextComm comm, bool backward, int cp, int B,
                                             int T_local, int KV, int hs, std::size_t value_bytes) {
  const std::uint64_t block = static_cast<std::uint64_t>(B) * T_local * 2 * KV * hs * value_bytes;
  const std::uint64_t steps = static_cast<std::uint64_t>(cp - 1);
  if (!backward || cp == 1) return steps * block;
  return comm == ContextComm::ring ? (2 * steps + 1) * block : 2 * steps * block;
}

// The working memory of one member's ContextAttention for micro-batches of up to B sequences of
// T_local rows, NH query heads over KV key/value heads of size hs (its backward's, the larger):
// the K/V blocks and their gradients (ring: two travelling [K/V | dK/dV] pairs; all_gather: cp
// blocks, cp gradient blocks and this member's reduced ones), the partial outputs, and two
// statistics per (row, head) (the partial lse and D) from the next 256-byte boundary.
inline std::size_t context_attention_memory_bytes(ContextComm comm, int cp, int B, int T_local,
                                                  int NH, int KV, int hs, std::size_t value_bytes,
                                                  std::size_t stat_bytes) {
  const std::size_t rows = static_cast<std::size_t>(B) * T_local;
  const std::size_t block = rows * 2 * KV * hs;
  const std::size_t blocks =
      comm == ContextComm::ring ? 4 * block : (2 * static_cast<std::size_t>(cp) + 1) * block;
  const std::size_t values = ((blocks + rows * NH * hs) * value_bytes + 255) / 256 * 256;
  return values + 2 * rows * NH * stat_bytes;
}

template <class Ops>
class ContextAttention {
 public:
  using Value = typename Ops::Value;
  using Stat = typename Ops::Stat;

  // This member's heads: NH query heads over KV key/value heads of size hs (its tensor-parallel
  // share).
  struct Heads {
    int NH = 0, KV = 0, hs = 0;
    long C() const { return static_cast<long>(NH) * hs; }
    long kv_width() const { return 2L * KV * hs; }  // a K/V block row: [k | v]
    long C3() const { return C() + kv_width(); }    // a qkv row
  };

  // `group`: the context-parallel members, in chunk order (not owned): the ops' Group (CPU: the
  // host Collectives; CUDA: device collectives, staged through the host or NCCL), over which the
  // ops move the blocks (group_all_gather, group_reduce_scatter_sum, group_ring_shift). Its
  // working memory is reserved at once for micro-batches of up to max_batch sequences of T_local
  // rows of `heads` (context_attention_memory_bytes).
  using Group = typename Ops::Group;
  ContextAttention(Ops& ops, Group& group, ContextComm comm, int max_batch, int T_local,
                   const Heads& heads)
      : ops_(ops),
        group_(group),
        comm_(comm),
        max_batch_(max_batch),
        max_rows_(T_local),
        heads_(heads),
        memory_(memory_bytes()) {}

  // The bytes of its working memory.
  std::size_t memory_bytes() const {
    return context_attention_memory_bytes(comm_, group_.size(), max_batch_, max_rows_, heads_.NH,
                                          heads_.KV, heads_.hs, sizeof(Value), sizeof(Stat));
  }

  // qkv (B, T_local, C3), T_local = 2·Tc: this member's chunks r and 2cp−1−r of each sequence →
  // atty (B, T_local, C) and lse (B, NH, T_local), rounded as the ops round.
  void forward(Value* atty, Stat* lse, const Value* qkv, int B, int T_local, const Heads& h) {
    const Shape s = shape(B, T_local, h, false);
    Value* blocks = reserve(s);
    Value* own = comm_ == ContextComm::ring ? blocks : blocks + s.block * rank();
    ops_.copy_columns(own, h.kv_width(), qkv + h.C(), h.C3(), static_cast<long>(B) * T_local,
                      static_cast<int>(h.kv_width()));
    if (comm_ == ContextComm::all_gather) ops_.group_all_gather(group_, own, blocks, s.block);
    Value* part = parts_;
    Stat* part_lse = part_lse_;
    bool written[2] = {false, false};
    for_each_block(s, blocks, [&](int owner, Value* block) {
      for_each_pair(s, owner, [&](int qi, int kj, long offset) {
        const AttentionPair pair = pair_of(s, offset);
        const long out_at = qi * s.Tc * h.C(), stat_at = qi * s.Tc;
        const Value* k = block + kj * s.Tc * h.kv_width();
        const Value* q = qkv + qi * s.Tc * h.C3();
        if (!written[qi]) {
          ops_.attention_pair_forward(atty + out_at, lse + stat_at, q, k, k + h.KV * h.hs, pair);
          written[qi] = true;
        } else {
          ops_.attention_pair_forward(part + out_at, part_lse + stat_at, q, k, k + h.KV * h.hs,
                                      pair);
          ops_.attention_merge(atty + out_at, lse + stat_at, part + out_at, part_lse + stat_at,
                               pair);
        }
      });
    });
    ops_.round_to_compute(atty, static_cast<long>(B) * T_local * h.C());
  }

  // dqkv (B, T_local, C3) overwritten, from datty (B, T_local, C) and the forward's qkv, atty and
  // lse; rounded as the ops round.
  void backward(Value* dqkv, const Value* datty, const Value* qkv, const Value* atty,
                const Stat* lse, int B, int T_local, const Heads& h) {
    const Shape s = shape(B, T_local, h, true);
    Value* blocks = reserve(s);
    const long rows = static_cast<long>(B) * T_local;
    // The row terms over all this member's rows: one pair of T_local rows (only its strides read).
    AttentionPair all_rows = pair_of(s, 0);
    all_rows.Tq = T_local;
    ops_.attention_delta(delta_, datty, atty, all_rows);
    ops_.zero(dqkv, static_cast<std::size_t>(rows * h.C3()));
    // Blocks and their gradients: all_gather, cp of each then this member's reduced gradients;
    // ring, [K/V | dK/dV] current, then the same incoming.
    const std::size_t block = s.block;
    Value* own = comm_ == ContextComm::ring ? blocks : blocks + block * rank();
    ops_.copy_columns(own, h.kv_width(), qkv + h.C(), h.C3(), rows, static_cast<int>(h.kv_width()));
    Value* grads = nullptr;  // all_gather: every block's dK/dV, cp·block
    if (comm_ == ContextComm::all_gather) {
      ops_.group_all_gather(group_, own, blocks, block);
      grads = blocks + size() * block;
      ops_.zero(grads, size() * block);
    } else {
      ops_.zero(blocks + block, block);  // the own block's dK/dV
    }
    for_each_block(s, blocks, [&](int owner, Value* kv) {
      Value* dkv = comm_ == ContextComm::ring ? kv + block : grads + owner * block;
      for_each_pair(s, owner, [&](int qi, int kj, long offset) {
        const AttentionPair pair = pair_of(s, offset);
        const long key_at = kj * s.Tc * h.kv_width();
        const long stat_at = qi * s.Tc;
        const Value* k = kv + key_at;
        Value* dk = dkv + key_at;
        ops_.attention_pair_backward(dqkv + qi * s.Tc * h.C3(), dk, dk + h.KV * h.hs,
                                     datty + qi * s.Tc * h.C(), lse + stat_at, delta_ + stat_at,
                                     qkv + qi * s.Tc * h.C3(), k, k + h.KV * h.hs, pair);
      });
    });
    const Value* own_grads = nullptr;
    if (comm_ == ContextComm::all_gather) {
      Value* reduced = grads + size() * block;
      ops_.group_reduce_scatter_sum(group_, grads, reduced, block);
      own_grads = reduced;
    } else {
      own_grads = blocks + block;  // home after the last step (for_each_block)
    }
    ops_.copy_columns(dqkv + h.C(), h.C3(), own_grads, h.kv_width(), rows,
                      static_cast<int>(h.kv_width()));
    ops_.round_to_compute(dqkv, rows * h.C3());
  }

 private:
  struct Shape {
    int cp = 1, rank = 0, B = 0, T_local = 0;
    long Tc = 0;
    Heads h;
    std::size_t block = 0;  // a K/V block's elements, B·T_local·2·KV·hs
    bool backward = false;
  };

  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }

  Shape shape(int B, int T_local, const Heads& h, bool backward) const {
    STRATA_CHECK(T_local % 2 == 0, "context parallelism: ", T_local,
                 " rows per sequence are not two equal chunks");
    STRATA_CHECK(B <= max_batch_ && T_local <= max_rows_ && h.NH == heads_.NH &&
                     h.KV == heads_.KV && h.hs == heads_.hs,
                 "context attention: a call beyond what its memory was reserved for");
    Shape s;
    s.cp = size();
    s.rank = rank();
    s.B = B;
    s.T_local = T_local;
    s.Tc = T_local / 2;
    s.h = h;
    s.block = static_cast<std::size_t>(B) * T_local * h.kv_width();
    s.backward = backward;
    return s;
  }

  // Chunk c of 2·cp: held by member c (its first) or 2·cp − 1 − c (its second).
  static long global_chunk(const Shape& s, int member, int local) {
    return local == 0 ? member : 2L * s.cp - 1 - member;
  }

  // body(qi, kj, offset) for each of this member's query chunks qi and key chunks kj of `owner`'s
  // block that it sees (key chunk at or before the query chunk), offset the rows between them.
  template <class Body>
  static void for_each_pair(const Shape& s, int owner, Body&& body) {
    for (int qi = 0; qi < 2; ++qi)
      for (int kj = 0; kj < 2; ++kj) {
        const long query = global_chunk(s, s.rank, qi), key = global_chunk(s, owner, kj);
        if (key <= query) body(qi, kj, (query - key) * s.Tc);
      }
  }

  // body(owner, block) for the blocks of members r, r − 1, …, r − cp + 1 in turn. all_gather:
  // `blocks` holds them all. ring: `blocks` holds this member's at first (in the backward pass
  // followed by its zeroed gradients), and each step's is passed on while body runs; in the
  // backward pass the gradients follow once body has added this member's part, and after the last
  // step the ones that arrive are this member's own.
  template <class Body>
  void for_each_block(const Shape& s, Value* blocks, Body&& body) {
    if (comm_ == ContextComm::all_gather) {
      for (int step = 0; step < s.cp; ++step) {
        const int owner = (s.rank - step + s.cp) % s.cp;
        body(owner, blocks + owner * s.block);
      }
      return;
    }
    const std::size_t travelling = s.backward ? 2 * s.block : s.block;
    Value* current = blocks;
    Value* incoming = blocks + travelling;
    for (int step = 0; step < s.cp; ++step) {
      const int owner = (s.rank - step + s.cp) % s.cp;
      std::unique_ptr<PendingCollective> next;
      if (step + 1 < s.cp) next = ops_.group_ring_shift(group_, current, incoming, s.block);
      body(owner, current);
      if (next) next->wait();
      if (s.cp == 1) break;  // nothing travels: the block and its gradients are this member's
      if (s.backward) {      // this block's gradients, complete here, on to the member after
        ops_.group_ring_shift(group_, current + s.block, incoming + s.block, s.block)->wait();
      }
      std::swap(current, incoming);
    }
    // The backward's own gradients, arrived in whichever buffer was incoming last.
    if (s.backward && current != blocks) ops_.copy(blocks + s.block, current + s.block, s.block);
  }

  // A query chunk of this member against a key chunk `offset` rows before it.
  static AttentionPair pair_of(const Shape& s, long offset) {
    AttentionPair p;
    p.B = s.B;
    p.Tq = static_cast<int>(s.Tc);
    p.Tk = static_cast<int>(s.Tc);
    p.NH = s.h.NH;
    p.KV = s.h.KV;
    p.hs = s.h.hs;
    p.causal_offset = offset;
    p.q_row = s.h.C3();
    p.q_batch = s.T_local * s.h.C3();
    p.out_row = s.h.C();
    p.out_batch = s.T_local * s.h.C();
    p.kv_row = s.h.kv_width();
    p.kv_batch = s.T_local * s.h.kv_width();
    p.stat_head = s.T_local;
    p.stat_batch = static_cast<long>(s.h.NH) * s.T_local;
    return p;
  }

  // The working memory for a call, laid out as context_attention_memory_bytes counts it: the
  // blocks (ring: two travelling buffers, each [K/V | dK/dV] in the backward pass; all_gather: cp
  // blocks, then in the backward cp gradient blocks and this member's reduced ones), the partial
  // outputs and lse, the row terms.
  Value* reserve(const Shape& s) {
    const std::size_t blocks = comm_ == ContextComm::ring
                                   ? (s.backward ? 4 : 2) * s.block
                                   : (s.backward ? 2 * s.cp + 1 : s.cp) * s.block;
    const std::size_t outputs = static_cast<std::size_t>(s.B) * s.T_local * s.h.C();
    const std::size_t stats = static_cast<std::size_t>(s.B) * s.h.NH * s.T_local;
    // The statistics start at a multiple of 256 bytes (Value and Stat may differ in size).
    const std::size_t values = ((blocks + outputs) * sizeof(Value) + 255) / 256 * 256;
    STRATA_CHECK(values + 2 * stats * sizeof(Stat) <= memory_.size());
    char* at = memory_.get();
    Value* block_memory = reinterpret_cast<Value*>(at);
    parts_ = block_memory + blocks;
    part_lse_ = reinterpret_cast<Stat*>(at + values);
    delta_ = part_lse_ + stats;
    return block_memory;
  }

  Ops& ops_;
  Group& group_;
  ContextComm comm_;
  int max_batch_, max_rows_;
  Heads heads_;
  typename Ops::Reservation memory_;
  Value* parts_ = nullptr;
  Stat* part_lse_ = nullptr;
  Stat* delta_ = nullptr;
};

}  // namespace strata
