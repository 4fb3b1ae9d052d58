// Causal self-attention with grouped key/value heads on a packed qkv tensor, scale 1/√(head_size).
// NH query heads share KV key/value heads (1 ≤ KV ≤ NH, NH % KV == 0): KV == NH is multi-head
// attention, KV == 1 multi-query, anything between grouped-query (GQA). hs = C / NH; a qkv row is
//   [q: NH·hs | k: KV·hs | v: KV·hs]      (row stride C3 = (NH + 2·KV)·hs; C3 = 3C when KV == NH)
// heads contiguous within each part (docs/ARCHITECTURE.md §5), and query head h reads key/value
// head h / (NH / KV): consecutive query heads share one, as Llama's repeat_kv lays them out.
//   qkv (B, T, C3) -> out (B, T, C)
// Each (b, h) pair is, per block of query rows, two GEMMs and a row softmax. The (B, NH, T, T)
// probabilities are never stored: the backward pass recomputes them, one head at a time, by the
// forward's own code (the same GEMM calls and softmax on the same inputs, so the very same values),
// as the CUDA kernel (model/kernels/cuda/attention.h) recomputes them from the logsumexp. At GPT-2
// small's T = 1024 that is 48 MiB per layer not written, kept and read back.
//
// `scratch` is the caller's: grown as needed and left allocated, so that calls after the first
// reuse its pages (one row block per thread in the forward pass, two (T, T) matrices per thread in
// the backward). One vector must not be used by two calls at once.
#pragma once

#include <vector>

#include "model/kernels/cpu/precision.h"

namespace strata::cpu {

template <class T>
void attention_forward(T* out, const T* qkv, int B, int T_, int C, int NH, int KV,
                       std::vector<T>& scratch);

// Query rows [t0, T_) of attention_forward for one sequence (B = 1) whose rows [0, t0) were run
// before: incremental decoding, where qkv holds the cached rows followed by the new ones and each
// new row attends causally over all of them. No probabilities are kept (no backward pass).
//   qkv (T_, C3) -> out (T_ − t0, C)
template <class T>
void attention_forward_rows(T* out, const T* qkv, int t0, int T_, int C, int NH, int KV);

// dqkv (B, T, C3) overwritten, in qkv's layout. dout (B, T, C). The dK and dV of a key/value head
// are the sums over the NH / KV query heads of its group, added in the group's order. The
// recomputed probabilities are rounded to `probs_dtype` before use, as an activation the forward
// pass had written in that dtype (precision.h; fp32 leaves them as computed).
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, int B, int T_, int C, int NH, int KV,
                        ComputeDtype probs_dtype, std::vector<T>& scratch);

}  // namespace strata::cpu
