// Softmax + cross-entropy (natural log) over a vocabulary shard, the three-phase contract of
// model/kernels/cpu/vocab_parallel.h: a rank holding logit columns [vocab_begin, vocab_begin + Vl)
// of (N, Vp) computes per-row pieces that the caller combines over the tensor-parallel group
// (maximum, then sums); only columns with global id < V are real, the rest get gradient 0.
// With one shard (vocab_begin 0, Vl = Vp) no combination is needed, and the single-shard kernels
// below make the row statistics in one pass (online softmax).
//
// Probabilities are never stored: the gradient (softmax − onehot) · dloss is always computed from
// the logits and the row statistics, the probability in fp32, rounded once to T, as the CPU model
// does (it keeps fp32 probabilities). Storing T probabilities and deriving the gradient from them
// would round twice, and in fp16 flush probabilities below 2^-24 whose scaled gradient is
// representable. A backward deferred from its forward (pipeline stages) keeps the logits and the
// three fp32 statistics per row instead.
//
// Logits and their gradients are T (float, __nv_bfloat16, __half); every per-row statistic (row
// max, sums, target logit, losses, dlosses) is fp32. Gradients overwrite the logits in place when
// asked to. One block per row, fixed-order block reductions (deterministic).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::cuda {

// row_max (N) = max over the shard's real columns of logits (N, Vl); −inf when it has none.
template <class T>
void crossentropy_shard_max(float* row_max, const T* logits, int vocab_begin, int V, int N, int Vl,
                            cudaStream_t stream);

// With the global row maxima: sum_exp (N) = Σ exp(logit − max) over the shard's real columns;
// target_logit (N) = the target's logit if the shard holds it, else 0.
template <class T>
void crossentropy_shard_sums(float* sum_exp, float* target_logit, const T* logits,
                             const std::int32_t* targets, const float* row_max, int vocab_begin,
                             int V, int N, int Vl, cudaStream_t stream);

// With the global sums: losses (N) = log(sum_exp) − (target_logit − max), the forward's losses
// when the gradient comes later.
void crossentropy_losses(float* losses, const float* row_max, const float* sum_exp,
                         const float* target_logit, int N, cudaStream_t stream);

// With the global statistics: losses (N) as crossentropy_losses computes them, and dlogits
// (N, Vl) = (softmax − onehot) · dlosses[n] straight from the logits, padded columns 0. dlogits
// may alias logits.
template <class T>
void crossentropy_shard_finish_backward(float* losses, T* dlogits, const T* logits,
                                        const std::int32_t* targets, const float* dlosses,
                                        const float* row_max, const float* sum_exp,
                                        const float* target_logit, int vocab_begin, int V, int N,
                                        int Vl, cudaStream_t stream);

// One shard (vocab_begin 0, Vl = Vp): losses (N) and the row statistics for a later
// crossentropy_shard_finish_backward (row_max, sum_exp, target_logit: N each), in one pass over
// each row. The logits are only read.
template <class T>
void softmax_crossentropy_stats(float* losses, float* row_max, float* sum_exp, float* target_logit,
                                const T* logits, const std::int32_t* targets, int N, int V, int Vp,
                                cudaStream_t stream);

// One shard, forward and backward in one launch: losses (N) and dlogits (N, Vp) =
// (softmax − onehot) · dlosses[n]. dlogits may alias logits.
template <class T>
void softmax_crossentropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                           const std::int32_t* targets, const float* dlosses, int N,
                                           int V, int Vp, cudaStream_t stream);

}  // namespace strata::cuda
