// The vocabulary-parallel ends of the model (Megatron): the embedding table wte (Vp, C) and the
// tied LM head are split by rows, a rank holding vocabulary ids [vocab_begin, vocab_begin + Vl).
// No rank ever holds full logits: the cross-entropy is assembled from per-shard pieces that the
// caller combines over the tensor-parallel group (maximum, then sums). With one shard
// (vocab_begin 0, Vl = Vp) these are the plain embedding and softmax cross-entropy.
#pragma once

#include <cstdint>

namespace strata::cpu {

// out (N, C) = wte_shard[tokens[n] − vocab_begin] for tokens in the shard, 0 otherwise.
template <class T>
void embedding_shard_forward(T* out, const std::int32_t* tokens, const T* wte_shard,
                             int vocab_begin, int Vl, int N, int C);

// dwte_shard (Vl, C) += scatter of dout (N, C) rows by token, tokens outside the shard skipped.
// Parallel over channel slices so the order of additions is fixed (reproducible).
template <class T>
void embedding_shard_backward(T* dwte_shard, const T* dout, const std::int32_t* tokens,
                              int vocab_begin, int Vl, int N, int C);

// x (rows, C) += wpe[(row_begin + r) % T_] : rows are a slice of the flattened (B, T_) positions.
template <class T>
void position_embedding_forward(T* x, const T* wpe, long row_begin, int rows, int T_, int C);

// dwpe (T_max, C) += dx rows by position (fixed order, as above).
template <class T>
void position_embedding_backward(T* dwpe, const T* dx, long row_begin, int rows, int T_, int C);

// row_max (N) = max over the shard's real columns (global id < V) of logits (N, Vl); −inf when the
// shard holds no real column.
template <class T>
void crossentropy_shard_max(T* row_max, const T* logits, int vocab_begin, int V, int N, int Vl);

// Given the global row maxima: sum_exp (N) = Σ exp(logit − max) over the shard's real columns,
// target_logit (N) = the target's logit if the shard holds it, else 0. Summed over shards by the
// caller.
template <class T>
void crossentropy_shard_sums(T* sum_exp, T* target_logit, const T* logits,
                             const std::int32_t* targets, const T* row_max, int vocab_begin, int V,
                             int N, int Vl);

// With global sums: losses (N) = log(sum_exp) − (target_logit − max); probs (N, Vl) = softmax
// over the shard's columns (0 for padded ones). probs may alias logits.
template <class T>
void crossentropy_shard_finish(T* losses, T* probs, const T* logits, const T* row_max,
                               const T* sum_exp, const T* target_logit, int vocab_begin, int V,
                               int N, int Vl);

// dlogits (N, Vl) = (probs − onehot(target)) · dlosses[n], padded columns 0. May alias probs.
template <class T>
void crossentropy_shard_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                                 const T* dlosses, int vocab_begin, int V, int N, int Vl);

}  // namespace strata::cpu
