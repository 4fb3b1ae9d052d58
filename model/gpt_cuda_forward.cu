// CudaGpt's forward pass (model/gpt_cuda.h): the embedding, the blocks, the head and the
// cross-entropy, and the fused forward-backward of a lone stage.
// Status: ran on an NVIDIA H200 (2026-11-26) as part of gpt_cuda.cu, before this split (a move).
// The MoE blocks' forward: compiled, never run on a GPU.
#include "model/gpt_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/gpt_cuda_storage.cuh"
#include "model/kernels/cuda/accumulate.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/crossentropy.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/residual.h"

namespace strata::cuda {

// The passes below only queue kernels: each release comes once the kernels that read a segment's
// weights (or add to its gradients) are queued on the compute stream, not once they have run. A
// ParameterAccess that frees, reuses or reduces a segment's memory on release must order that
// after them (work on the compute stream, or wait for an event recorded there); FlatParameters
// does nothing on release.
template <class T>
void CudaGpt<T>::embed(Slot& s, Parameters& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  // Each rank looks up the tokens of its vocabulary rows (zeros elsewhere); the sum over the
  // group is the embedding. Without sequence parallelism straight into the residual stream.
  T* lookup = sequence_parallel_ ? buffers_->partial : s.residual;
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::forward);
  embedding_shard_forward(lookup, s.tokens, in_segment(wte_weights, segment_.wte, "wte"),
                          vocab_begin, Vl, N, C, ctx_.stream());
  parameters.release_weights(segment_.wte);
  const T* x = sum_rows(lookup, s.residual, N);
  STRATA_CHECK(x == s.residual);
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nr : 0;
  const T* wpe_weights = parameters.acquire_weights(segment_.wpe, WeightUse::forward);
  position_embedding_forward(s.residual, in_segment(wpe_weights, segment_.wpe, "wpe"), row_begin,
                             Nr, s.time, C, ctx_.stream());
  parameters.release_weights(segment_.wpe);
}

// ln1 (all N rows) → qkv (N, 3Cl) → attention output (N, Cl) and logsumexp: what selective
// recomputation reruns (from the kept ln1 rows, no communication), one function for both.
template <class T>
void CudaGpt<T>::attention_core_forward(const Layer& a, const T* w, int l, int B, int T_,
                                        const T* ln1_full) {
  const int C = shape_.d_model, tp = partition_.tp_size, N = B * T_;
  const int Cl = C / tp;
  matmul_forward(ctx_, a.qkv, static_cast<T*>(nullptr), ln1_full, in_block(w, l, "attn.qkv.weight"),
                 in_block(w, l, "attn.qkv.bias"), N, C, 3 * Cl);
  attention_forward(a.atty, a.lse, a.qkv, B, T_, Cl, shape_.n_head / tp, ctx_.stream());
}

template <class T>
void CudaGpt<T>::block_forward(const Layer& a, const T* w, int l, int B, int T_) {
  const int C = shape_.d_model, tp = partition_.tp_size, N = B * T_;
  const int Nr = activation_rows(B, T_), Cl = C / tp, Hl = 4 * C / tp;
  auto p = [&](const char* name) { return in_block(w, l, name); };
  cudaStream_t stream = ctx_.stream();
  T* partial = buffers_->partial;
  // Attention: x2 = x + [sum](proj(attn(qkv(ln1(x))))) + b, then ln2 = LN(x2) in the same kernel.
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, p("ln1.weight"), p("ln1.bias"), Nr, C,
                    stream);
  attention_core_forward(a, w, l, B, T_, gather_rows(a.ln1, a.ln1_full, N));
  matmul_forward(ctx_, partial, static_cast<T*>(nullptr), a.atty, p("attn.proj.weight"),
                 static_cast<const T*>(nullptr), N, Cl, C);
  const T* y = sum_rows(partial, buffers_->reduced, N);
  residual_layernorm_forward(a.x2, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, y, p("attn.proj.bias"),
                             p("ln2.weight"), p("ln2.bias"), Nr, C, stream);
  const T* ln2_full = gather_rows(a.ln2, a.ln2_full, N);
  if (a.moe != nullptr) {
    // The experts: out = x2 + [sum](moe(ln2)), their proj biases inside (on tp rank 0). The layer
    // keeps a pointer to its input ln2_full (the slot's, or under full recompute the workspace's)
    // for the router's weight gradient.
    moe_->forward(*a.moe, ln2_full, N, T_, p("moe.router.weight"), partial);
    const T* z = sum_rows(partial, buffers_->reduced, N);
    residual_bias_forward(a.out, a.x2, z, static_cast<const T*>(nullptr), Nr, C, stream);
    return;
  }
  // MLP: out = x2 + [sum](proj(gelu(fc(ln2)))) + b, GELU in the fc GEMM's epilogue.
  matmul_forward(ctx_, a.fch_gelu, a.fch, ln2_full, p("mlp.fc.weight"), p("mlp.fc.bias"), N, C, Hl);
  matmul_forward(ctx_, partial, static_cast<T*>(nullptr), a.fch_gelu, p("mlp.proj.weight"),
                 static_cast<const T*>(nullptr), N, Hl, C);
  const T* z = sum_rows(partial, buffers_->reduced, N);
  residual_bias_forward(a.out, a.x2, z, p("mlp.proj.bias"), Nr, C, stream);
}

template <class T>
void CudaGpt<T>::head_forward(Slot& s, Parameters& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const T* x = stage_residual_output(s);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::forward);
  layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, in_segment(lnf, segment_.lnf, "lnf.weight"),
                    in_segment(lnf, segment_.lnf, "lnf.bias"), Nr, C, ctx_.stream());
  parameters.release_weights(segment_.lnf);
  const T* lnf_full = gather_rows(s.lnf, s.lnf_full, N);  // (N, C)
  // The head is tied to wte: logits (N, Vl) = lnf · wte_shardᵀ.
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::forward);
  matmul_forward(ctx_, s.logits, static_cast<T*>(nullptr), lnf_full,
                 in_segment(wte_weights, segment_.wte, "wte"), static_cast<const T*>(nullptr), N, C,
                 static_cast<int>(wte.slice.mid_count));
  parameters.release_weights(segment_.wte);
}

template <class T>
void CudaGpt<T>::cross_entropy(Slot& s, float fused_scale) {
  const int N = s.batch * s.time, V = shape_.vocab_size;
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  Buffers& b = *buffers_;
  cudaStream_t stream = ctx_.stream();
  const bool fused = fused_scale > 0;
  float *row_max = s.ce_stats, *sum_exp = s.ce_stats + N, *target_logit = s.ce_stats + 2 * N;
  // d(scale · mean)/d(loss_n) = scale / N.
  if (fused) fill(b.dlosses, fused_scale / static_cast<float>(N), N, stream);
  if (!tp_) {  // one shard: online softmax in one pass over each row
    if (fused)
      softmax_crossentropy_forward_backward(s.losses, s.logits, s.logits, s.targets, b.dlosses, N,
                                            V, Vl, stream);
    else
      softmax_crossentropy_stats(s.losses, row_max, sum_exp, target_logit, s.logits, s.targets, N,
                                 V, Vl, stream);
    return;
  }
  // Shards: global row maxima, then global sums of exp and target logits, then the rest.
  crossentropy_shard_max(row_max, s.logits, vocab_begin, V, N, Vl, stream);
  tp_->all_reduce_max(row_max, static_cast<std::size_t>(N), stream);
  crossentropy_shard_sums(sum_exp, target_logit, s.logits, s.targets, row_max, vocab_begin, V, N,
                          Vl, stream);
  tp_->all_reduce_sum(sum_exp, 2 * static_cast<std::size_t>(N), stream);  // and target_logit
  if (fused)
    crossentropy_shard_finish_backward(s.losses, s.logits, s.logits, s.targets, b.dlosses, row_max,
                                       sum_exp, target_logit, vocab_begin, V, N, Vl, stream);
  else
    crossentropy_losses(s.losses, row_max, sum_exp, target_logit, N, stream);
}

// The blocks of a forward pass, each segment's weights acquired around its kernels.
template <class T>
void CudaGpt<T>::blocks_forward(Slot& s, Parameters& parameters) {
  for (int l = 0; l < partition_.layers(); ++l) {
    const T* weights = parameters.acquire_weights(block_segment(l), WeightUse::forward);
    block_forward(layer(s, l, false), weights, l, s.batch, s.time);
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
  if (s.has_targets) cross_entropy(s, 0);  // losses and row statistics; the logits stay
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
  cross_entropy(s, loss_scale);
  s.forwarded = true;
  s.has_targets = true;
  backward_pass(s, parameters, loss_scale, true);
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda
