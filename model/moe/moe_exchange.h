// How the kept assignments of one micro-batch reach the ranks that hold their experts and come
// back (expert parallelism, parallel.ep; docs/ARCHITECTURE.md §2 "Expert parallelism"): the
// token permutation of a mixture-of-experts layer and its inverse, over a group of P ranks that
// hold E/P experts each (member m: experts [m·E/P, (m+1)·E/P)). With P = 1 it is the permutation
// alone (the exchange is a copy).
//
// The origin's rows are its kept assignments grouped by expert (MoeRouting::assignments), so
// member m's chunk is the contiguous block of experts [m·E/P, (m+1)·E/P). The exchange sends the
// per-expert counts first (one all-to-all of E/P ints to each member), then the payload; the
// receiver lays its rows out expert-major: for each of its experts, the rows from member 0 (in
// member 0's token order), then from member 1, … — with P = 1 exactly the origin's order, so the
// experts see the same rows in the same order as without expert parallelism.
//
// Collective over the group: every member calls plan/dispatch/combine for the same micro-batches
// in the same order (the pipeline schedule is the same on every data-parallel rank).
#pragma once

#include <cstddef>
#include <vector>

#include "model/core/collectives.h"
#include "model/moe/moe_routing.h"

namespace strata {

struct MoeExchange {
  int members = 1, experts_per_member = 0;
  std::vector<std::size_t> sent_rows;      // (P) rows to each member (its experts' assignments)
  std::vector<std::size_t> received_rows;  // (P) rows from each member
  std::vector<int> expert_offsets;         // (E/P + 1) expert-major rows of this rank's experts
  std::vector<int> order;                  // (R) expert-major row i is received row order[i]

  int received() const { return static_cast<int>(order.size()); }
  int expert_rows(int local_expert) const {
    return expert_offsets[static_cast<std::size_t>(local_expert) + 1] -
           expert_offsets[static_cast<std::size_t>(local_expert)];
  }
  // Rows this rank sends in a dispatch (A, its kept assignments), to itself included.
  std::size_t rows_sent() const;
  // Rows this rank sends to other members in one direction (a dispatch sends these, a combine
  // the rows received from the others: received_rows less its own).
  std::size_t rows_to_others(int self) const;
  std::size_t rows_from_others(int self) const;
};

// The counts exchange: from `routing` (this rank's tokens) and the group, which rows go where.
MoeExchange plan_moe_exchange(const MoeRouting& routing, Collectives& group);

// Origin → experts: `rows` (A, width), grouped by expert as routing.assignments, arrive at their
// experts' members as `expert_rows` (R, width), expert-major (overwritten, resized to fit).
// T: float or double (the CPU model's rows), or std::uint8_t for rows moved as raw bytes, `width`
// then in bytes: a CUDA model's rows of any dtype (bf16 and fp16 as their exact 16 bits, no wider
// than on the device) through the same code.
template <class T>
void moe_dispatch(const MoeExchange& x, Collectives& group, const T* rows, int width,
                  std::vector<T>& expert_rows);
// Experts → origin, the inverse: `expert_rows` (R, width) back to `rows` (A, width).
template <class T>
void moe_combine(const MoeExchange& x, Collectives& group, const T* expert_rows, int width,
                 std::vector<T>& rows);
// The same two into arrays the caller sized: R·width elements for moe_dispatch, A·width for
// moe_combine (CpuOps's moe_exchange_rows, whose rows live wherever its MoE layer keeps them).
template <class T>
void moe_dispatch(const MoeExchange& x, Collectives& group, const T* rows, int width,
                  T* expert_rows);
template <class T>
void moe_combine(const MoeExchange& x, Collectives& group, const T* expert_rows, int width,
                 T* rows);

}  // namespace strata
