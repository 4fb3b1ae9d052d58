// Token and position embeddings, vocabulary-parallel (model/kernels/cpu/vocab_parallel.h): this
// rank holds wte rows [vocab_begin, vocab_begin + Vl); with one shard (vocab_begin 0, Vl = Vp)
// these are the plain embedding. Token ids are not range-checked here (the caller validates them on
// the host, as Gpt does).
//
// Backward passes are deterministic without atomics:
//  - wte: rows are grouped by token with a stable radix sort of (local id, row) pairs (CUB); each
//    token's gradient row is then summed by one block in increasing row order, starting from the
//    existing gradient value, the same order as the CPU reference.
//  - wpe: one thread per (position, channel) gathers the rows at that position in increasing order.
// Gradients of the tables are fp32; activations and their gradients are T.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/kernels/cuda/arena.h"

namespace strata::cuda {

// out (N, C) = wte_shard[tokens[n] − vocab_begin] for tokens in the shard, 0 otherwise.
template <class T>
void embedding_shard_forward(T* out, const std::int32_t* tokens, const T* wte_shard,
                             int vocab_begin, int Vl, int N, int C, cudaStream_t stream);

// x (rows, C) += wpe[(row_begin + r) % T_]: rows are a slice of the flattened (B, T_) positions.
template <class T>
void position_embedding_forward(T* x, const T* wpe, long row_begin, int rows, int T_, int C,
                                cudaStream_t stream);

// dwte_shard (Vl, C, fp32) += dout (N, C) rows scattered by token; tokens outside the shard are
// skipped. Scratch from `arena` (about 16·N bytes plus CUB's sort storage), released on return.
template <class T>
void embedding_shard_backward(float* dwte_shard, const T* dout, const std::int32_t* tokens,
                              int vocab_begin, int Vl, int N, int C, DeviceArena& arena,
                              cudaStream_t stream);

// dwpe (T_max, C, fp32) += dx rows by position.
template <class T>
void position_embedding_backward(float* dwpe, const T* dx, long row_begin, int rows, int T_, int C,
                                 cudaStream_t stream);

}  // namespace strata::cuda
