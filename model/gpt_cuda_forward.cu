// CudaGpt's forward pass (model/gpt_cuda.h): the embedding, the blocks, the head and the
// cross-entropy, and the fused forward-backward of a lone stage, each kernel an op of ops_
// (model/ops/cuda_ops.h).
// Status: ran on an NVIDIA H200 (2026-11-26) as part of gpt_cuda.cu, before this split (a move)
// and before its launches moved into CudaOps (not run on a GPU since). The MoE blocks' forward:
// compiled, never run on a GPU.
#include "model/gpt_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/gpt_cuda_storage.cuh"

namespace strata::cuda {

// The passes below only queue kernels: each release comes once the kernels that read a segment's
// weights (or add to its gradients) are queued on the compute stream, not once they have run. A
// ParameterAccess that frees, reuses or reduces a segment's memory on release must order that
// after them (work on the compute stream, or wait for an event recorded there); FlatParameters
// does nothing on release.
template <class T>
void CudaGpt<T>::embed(Slot& s, Parameters& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  // Each rank looks up the tokens of its vocabulary rows (zeros elsewhere); the sum over the
  // group is the embedding. Without sequence parallelism straight into the residual stream.
  T* lookup = sequence_parallel_ ? buffers_->partial : s.residual;
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::forward);
  ops_.embedding_forward(lookup, s.tokens, in_segment(wte_weights, segment_.wte, "wte"),
                         vocab_shard(), N, C);
  parameters.release_weights(segment_.wte);
  const T* x = ops_.sum_rows(lookup, s.residual, N, C);
  STRATA_CHECK(x == s.residual);
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nr : 0;
  const T* wpe_weights = parameters.acquire_weights(segment_.wpe, WeightUse::forward);
  ops_.position_embedding_forward(s.residual, in_segment(wpe_weights, segment_.wpe, "wpe"),
                                  row_begin, Nr, s.time, C);
  parameters.release_weights(segment_.wpe);
}

template <class T>
void CudaGpt<T>::head_forward(Slot& s, Parameters& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const T* x = stage_residual_output(s);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::forward);
  ops_.layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x,
                         in_segment(lnf, segment_.lnf, "lnf.weight"),
                         in_segment(lnf, segment_.lnf, "lnf.bias"), Nr, C);
  parameters.release_weights(segment_.lnf);
  const T* lnf_full = ops_.gather_rows(s.lnf, s.lnf_full, N, C);  // (N, C)
  // The head is tied to wte: logits (N, Vl) = lnf · wte_shardᵀ.
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::forward);
  ops_.matmul_forward(s.logits, nullptr, lnf_full, in_segment(wte_weights, segment_.wte, "wte"),
                      nullptr, N, C, vocab_shard().rows, Epilogue::bias);
  parameters.release_weights(segment_.wte);
}

// The blocks of a forward pass, each segment's weights acquired around its kernels.
template <class T>
void CudaGpt<T>::blocks_forward(Slot& s, Parameters& parameters) {
  for (int l = 0; l < partition_.layers(); ++l) {
    const T* weights = parameters.acquire_weights(block_segment(l), WeightUse::forward);
    block().forward(layer(s, l, false), s.batch, s.time,
                    typename Block::Weights(weights, block_offsets_[static_cast<std::size_t>(l)]));
    parameters.release_weights(block_segment(l));
  }
}

template <class T>
void CudaGpt<T>::forward(int slot, Parameters& parameters, const std::int32_t* tokens,
                         const std::int32_t* targets, int B, int T_) {
  Slot& s = slot_for(slot, B, T_);
  const bool has_head = partition_.has_head;
  if (partition_.has_embedding) STRATA_CHECK(tokens != nullptr, "the first stage needs tokens");
  upload_tokens(s, partition_.has_embedding ? tokens : nullptr, has_head ? targets : nullptr,
                static_cast<long>(B) * T_);
  if (partition_.has_embedding) embed(s, parameters);
  blocks_forward(s, parameters);
  if (has_head) head_forward(s, parameters);
  s.forwarded = true;
  s.has_targets = has_head && targets != nullptr;
  if (s.has_targets)  // losses and row statistics; the logits stay
    ops_.cross_entropy_forward(s.losses, s.ce_stats, s.logits, s.targets, vocab_shard(), B * T_);
}

template <class T>
void CudaGpt<T>::forward_backward(Parameters& parameters, const std::int32_t* tokens,
                                  const std::int32_t* targets, int B, int T_, float loss_scale) {
  STRATA_CHECK(partition_.has_embedding && partition_.has_head,
               "forward_backward runs a whole pipeline; stages use forward and backward");
  STRATA_CHECK(targets != nullptr, "training needs targets");
  STRATA_CHECK(loss_scale > 0, "the loss scale must be positive");
  Slot& s = slot_for(0, B, T_);
  upload_tokens(s, tokens, targets, static_cast<long>(B) * T_);
  embed(s, parameters);
  blocks_forward(s, parameters);
  head_forward(s, parameters);
  // The loss and its logit gradient in one pass, the gradient overwriting the logits.
  ops_.cross_entropy_forward_backward(s.losses, s.ce_stats, s.logits, s.targets, loss_scale,
                                      vocab_shard(), B * T_);
  s.forwarded = true;
  s.has_targets = true;
  backward_pass(s, parameters, loss_scale, true);
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda
