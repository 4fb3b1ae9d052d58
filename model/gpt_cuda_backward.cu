// CudaGpt's backward pass (model/gpt_cuda.h): the head, the blocks (with their recomputation)
// and the embedding, in the CPU model's order.
// Status: ran on an NVIDIA H200 (2026-11-26) as part of gpt_cuda.cu, before this split (a move).
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

template <class T>
void CudaGpt<T>::backward(int slot, Parameters& parameters, float loss_scale) {
  const bool held = slot >= 0 && slot < slots();
  check_slot_backward(slot_limits(), held ? slots_[static_cast<std::size_t>(slot)] : SlotState{},
                      slot, partition_.has_head);
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  backward_pass(s, parameters, loss_scale, false);
}

template <class T>
void CudaGpt<T>::backward_pass(Slot& s, Parameters& parameters, float loss_scale, bool fused) {
  // The tied wte takes gradients from the head and from the embedding: one acquisition spans both.
  float* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
  // A stage before the last starts from the output gradient its caller wrote into dres.
  if (partition_.has_head) {
    head_backward(s, parameters, wte_grads, loss_scale, fused);
    if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
  }
  for (int l = partition_.layers() - 1; l >= 0; --l) block_backward(s, parameters, l);
  if (partition_.has_embedding) {
    embed_backward(s, parameters, wte_grads);
    parameters.release_gradients(segment_.wte);
  }
  s.forwarded = false;
}

template <class T>
void CudaGpt<T>::head_backward(Slot& s, Parameters& parameters, float* wte_grads, float loss_scale,
                               bool fused) {
  const int C = shape_.d_model, V = shape_.vocab_size;
  const int N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  Buffers& b = *buffers_;
  cudaStream_t stream = ctx_.stream();
  if (!fused) {  // dlogits overwrite the logits in place, from the forward's row statistics
    fill(b.dlosses, loss_scale / static_cast<float>(N), N, stream);
    // Rewrites the forward's losses with the same values (the same formula on the same inputs).
    crossentropy_shard_finish_backward(s.losses, s.logits, s.logits, s.targets, b.dlosses,
                                       s.ce_stats, s.ce_stats + N, s.ce_stats + 2 * N, vocab_begin,
                                       V, N, Vl, stream);
  }
  const T* lnf_full = sequence_parallel_ ? s.lnf_full : s.lnf;
  matmul_backward_weight(ctx_, in_segment(wte_grads, segment_.wte, "wte"), nullptr, s.logits,
                         lnf_full, N, C, Vl, scratch_);
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::backward);
  matmul_backward_input(ctx_, b.dln, s.logits, in_segment(wte_weights, segment_.wte, "wte"),
                        static_cast<const T*>(nullptr), N, C, Vl);
  parameters.release_weights(segment_.wte);
  const T* dlnf = sum_rows(b.dln, b.dln_local, N);  // (Nr, C)
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(b.dres, 0, static_cast<std::size_t>(Nr) * C * sizeof(T), stream));
  const T* x = stage_residual_output(s);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::backward);
  float* lnf_grads = parameters.acquire_gradients(segment_.lnf);
  layernorm_backward(b.dres, in_segment(lnf_grads, segment_.lnf, "lnf.weight"),
                     in_segment(lnf_grads, segment_.lnf, "lnf.bias"), dlnf, x,
                     in_segment(lnf, segment_.lnf, "lnf.weight"), s.lnf_mean, s.lnf_rstd, Nr, C,
                     scratch_, stream);
  parameters.release_weights(segment_.lnf);
  parameters.release_gradients(segment_.lnf);
}

template <class T>
void CudaGpt<T>::block_backward(Slot& s, Parameters& parameters, int l) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int N = B * T_, Nr = activation_rows(B, T_), Cl = C / tp, Hl = 4 * C / tp;
  const int segment = block_segment(l);
  // One acquisition of the weights serves the recomputation and the backward pass.
  const T* w = parameters.acquire_weights(segment, WeightUse::backward);
  float* grads = parameters.acquire_gradients(segment);
  auto p = [&](const char* name) { return in_block(w, l, name); };
  auto g = [&](const char* name) { return in_block(grads, l, name); };
  cudaStream_t stream = ctx_.stream();
  Buffers& b = *buffers_;
  const Layer a = layer(s, l, true);
  // Bring back what the forward dropped, by the forward's own code on the same inputs.
  if (recompute_ == Recompute::full)
    block_forward(a, w, l, B, T_);
  else if (recompute_ == Recompute::selective)
    attention_core_forward(a, w, l, B, T_, sequence_parallel_ ? a.ln1_full : a.ln1);
  const T* ln1_full = sequence_parallel_ ? a.ln1_full : a.ln1;
  const T* ln2_full = sequence_parallel_ ? a.ln2_full : a.ln2;
  // A row-parallel layer's bias is replicated: with sequence parallelism each rank adds its rows'
  // share (the trainer sums replicated gradients over the group), otherwise the GEMM's epilogue
  // adds the whole from the same pass.
  auto row_parallel_bias = [&](const char* name) -> float* {
    if (!sequence_parallel_) return g(name);
    bias_backward(g(name), b.dres, Nr, C, scratch_, stream);
    return nullptr;
  };

  // MLP: out = x2 + [sum](h·Wprojᵀ) + b, h = gelu(fch); dres is d(loss)/d(out).
  float* mlp_proj_bias = row_parallel_bias("mlp.proj.bias");
  const T* dz = gather_rows(b.dres, b.dfull, N);  // (N, C)
  matmul_backward_weight(ctx_, g("mlp.proj.weight"), mlp_proj_bias, dz, a.fch_gelu, N, Hl, C,
                         scratch_);
  matmul_backward_input(ctx_, b.dfch, dz, p("mlp.proj.weight"), a.fch, N, Hl,
                        C);  // d/d(fch): GELU' in the epilogue
  matmul_backward_weight(ctx_, g("mlp.fc.weight"), g("mlp.fc.bias"), b.dfch, ln2_full, N, C, Hl,
                         scratch_);
  matmul_backward_input(ctx_, b.dln, b.dfch, p("mlp.fc.weight"), static_cast<const T*>(nullptr), N,
                        C, Hl);
  const T* dln2 = sum_rows(b.dln, b.dln_local, N);  // (Nr, C)
  layernorm_backward(b.dres, g("ln2.weight"), g("ln2.bias"), dln2, a.x2, p("ln2.weight"),
                     a.ln2_mean, a.ln2_rstd, Nr, C, scratch_, stream);
  // Attention: x2 = x + [sum](atty·Wprojᵀ) + b; dres is now d(loss)/d(x2).
  float* attn_proj_bias = row_parallel_bias("attn.proj.bias");
  const T* dy = gather_rows(b.dres, b.dfull, N);
  matmul_backward_weight(ctx_, g("attn.proj.weight"), attn_proj_bias, dy, a.atty, N, Cl, C,
                         scratch_);
  matmul_backward_input(ctx_, b.datty, dy, p("attn.proj.weight"), static_cast<const T*>(nullptr), N,
                        Cl, C);
  attention_backward(b.dqkv, b.datty, a.qkv, a.atty, a.lse, B, T_, Cl, shape_.n_head / tp, scratch_,
                     stream);
  matmul_backward_weight(ctx_, g("attn.qkv.weight"), g("attn.qkv.bias"), b.dqkv, ln1_full, N, C,
                         3 * Cl, scratch_);
  matmul_backward_input(ctx_, b.dln, b.dqkv, p("attn.qkv.weight"), static_cast<const T*>(nullptr),
                        N, C, 3 * Cl);
  const T* dln1 = sum_rows(b.dln, b.dln_local, N);
  layernorm_backward(b.dres, g("ln1.weight"), g("ln1.bias"), dln1, a.x, p("ln1.weight"), a.ln1_mean,
                     a.ln1_rstd, Nr, C, scratch_, stream);
  parameters.release_weights(segment);
  parameters.release_gradients(segment);
}

template <class T>
void CudaGpt<T>::embed_backward(Slot& s, Parameters& parameters, float* wte_grads) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  Buffers& b = *buffers_;
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nr : 0;
  float* wpe_grads = parameters.acquire_gradients(segment_.wpe);
  position_embedding_backward(in_segment(wpe_grads, segment_.wpe, "wpe"), b.dres, row_begin, Nr,
                              s.time, C, ctx_.stream());
  parameters.release_gradients(segment_.wpe);
  const T* dfull = gather_rows(b.dres, b.dfull, N);  // (N, C)
  embedding_shard_backward(in_segment(wte_grads, segment_.wte, "wte"), dfull, s.tokens,
                           static_cast<int>(wte.slice.mid_begin),
                           static_cast<int>(wte.slice.mid_count), N, C, scratch_, ctx_.stream());
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda
