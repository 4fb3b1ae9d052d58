// Causal self-attention with grouped key/value heads, scale 1/√(head_size), blocked flash-style
// (the FlashAttention-2 algorithm on the CPU's GEMMs): no (T, T) matrix exists at any time.
//
// Heads. NH query heads share KV key/value heads (1 ≤ KV ≤ NH, NH % KV == 0): KV == NH is
// multi-head attention, KV == 1 multi-query, anything between grouped-query (GQA). hs = C / NH, and
// query head h reads key/value head h / (NH / KV): consecutive query heads share one, as Llama's
// repeat_kv lays them out. The packed qkv row of the model is
//   [q: NH·hs | k: KV·hs | v: KV·hs]      (row stride C3 = (NH + 2·KV)·hs; C3 = 3C when KV == NH)
// heads contiguous within each part (docs/ARCHITECTURE.md §5).
//
// Blocking. Per (sequence, head), query rows go in blocks of kQueryBlock and keys in blocks of
// kKeyBlock (attention.cpp): one (query block, key block) tile of scores at a time, per thread.
// The forward pass keeps a running maximum and sum per query row (an online softmax) and writes
// the output and each row's log-sum-exp (lse); the backward pass recomputes each tile's
// probabilities as exp(score − lse), so it needs the forward's lse and output (for the row terms
// D = rowsum(dout ⊙ out)), as the CUDA kernels do (model/kernels/cuda/attention.h). Tiles wholly
// above the causal diagonal are skipped. A thread's scratch is one tile in the forward pass and
// two in the backward, whatever T: long sequences fit in memory (before, the backward pass held
// two (T, T) matrices per thread).
//
// Chunks. Every pass is defined on a chunk pair: Tq query rows against Tk key/value rows in any
// strided tensors, query row t seeing key s iff s ≤ t + causal_offset (the query chunk's first
// position minus the key chunk's). The packed calls below are the chunk pair of a whole sequence
// with itself (offset 0); context parallelism runs one query chunk against each key chunk of the
// sequence, merges the partial outputs by their lse (attention_merge), and in the backward pass
// adds each pair's gradients, with the whole row's lse and D (attention_delta).
//
// `scratch` is the caller's: grown as needed and left allocated, so that calls after the first
// reuse its pages. One vector must not be used by two calls at once.
#pragma once

#include <type_traits>
#include <vector>

#include "model/kernels/cpu/precision.h"

namespace strata::cpu {

// Rows of a strided tensor: row t of sequence b starts at data + b·batch_stride + t·row_stride,
// and head j's hs values at column j·hs of it.
template <class T>
struct AttentionRows {
  T* data = nullptr;
  long row_stride = 0;
  long batch_stride = 0;
  T* row(int b, int t) const { return data + b * batch_stride + t * row_stride; }
  // To the read-only view (a template, so that the read-only type itself declares no conversion
  // to itself).
  template <class U = T>
  requires(!std::is_const_v<U>) operator AttentionRows<const U>() const {
    return {data, row_stride, batch_stride};
  }
};

// One value per (sequence, head, row): (b, h, t) at data + b·batch_stride + h·head_stride + t.
template <class T>
struct AttentionStats {
  T* data = nullptr;
  long head_stride = 0;
  long batch_stride = 0;
  T* head(int b, int h) const { return data + b * batch_stride + h * head_stride; }
  template <class U = T>
  requires(!std::is_const_v<U>) operator AttentionStats<const U>() const {
    return {data, head_stride, batch_stride};
  }
};

// B sequences' Tq query rows against their Tk key/value rows: query row t sees key row s iff
// s ≤ t + causal_offset. 0 is a sequence with itself; ≥ Tk − 1 sees every key (a later chunk
// against an earlier one); a row that sees no key has output 0 and lse −∞.
struct AttentionChunk {
  int B = 0, Tq = 0, Tk = 0;
  int NH = 0, KV = 0, hs = 0;
  long causal_offset = 0;
};

// out (B, Tq, NH·hs) and lse (B, NH, Tq) overwritten (lse.data may be null: not kept).
template <class T>
void attention_chunk_forward(AttentionRows<T> out, AttentionStats<T> lse, AttentionRows<const T> q,
                             AttentionRows<const T> k, AttentionRows<const T> v,
                             const AttentionChunk& chunk, std::vector<T>& scratch);

// out and lse hold one partial attention of their rows, `part` and part_lse another over keys
// disjoint from the first's: out and lse become the attention over both (model/kernels/
// attention_merge.h, the arithmetic the GPU's merge runs). Rows: the chunk's B·Tq.
template <class T>
void attention_merge(AttentionRows<T> out, AttentionStats<T> lse, AttentionRows<const T> part,
                     AttentionStats<const T> part_lse, const AttentionChunk& chunk);

// delta (B, NH, Tq) = Σ_j dout ⊙ out over each head's hs values: the backward pass's row terms,
// computed from the final (merged) output.
template <class T>
void attention_delta(AttentionStats<T> delta, AttentionRows<const T> dout,
                     AttentionRows<const T> out, const AttentionChunk& chunk);

// Adds this chunk pair's gradients into dq (query rows), dk and dv (key/value rows; a key/value
// head's are the sums over its group's query heads, added in the group's order). lse and delta are
// the query rows' over all their keys. The recomputed probabilities are rounded to `probs_dtype`
// before use, as an activation the forward pass had written in that dtype (precision.h; fp32 leaves
// them as computed).
template <class T>
void attention_chunk_backward(AttentionRows<T> dq, AttentionRows<T> dk, AttentionRows<T> dv,
                              AttentionRows<const T> dout, AttentionStats<const T> lse,
                              AttentionStats<const T> delta, AttentionRows<const T> q,
                              AttentionRows<const T> k, AttentionRows<const T> v,
                              const AttentionChunk& chunk, ComputeDtype probs_dtype,
                              std::vector<T>& scratch);

// The packed calls: qkv (B, T, C3) -> out (B, T, C), lse (B, NH, T).
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                       std::vector<T>& scratch);

// Query rows [t0, T_) of attention_forward for one sequence (B = 1) whose rows [0, t0) were run
// before: incremental decoding, where qkv holds the cached rows followed by the new ones and each
// new row attends causally over all of them (a chunk pair with causal offset t0). No statistics
// are kept (no backward pass).
//   qkv (T_, C3) -> out (T_ − t0, C)
template <class T>
void attention_forward_rows(T* out, const T* qkv, int t0, int T_, int C, int NH, int KV);

// dqkv (B, T, C3) overwritten, in qkv's layout, from dout (B, T, C) and the forward's qkv, out and
// lse.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int T_, int C, int NH, int KV, ComputeDtype probs_dtype,
                        std::vector<T>& scratch);

}  // namespace strata::cpu
