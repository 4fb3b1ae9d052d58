// CudaGpt's backward pass (model/gpt_cuda.h): the head, the blocks (with their recomputation)
// and the embedding, in the CPU model's order, each an input half and a weight half
// (docs/ARCHITECTURE.md §5, the split backward), run back to back (backward) or apart
// (backward_input, then backward_weight); each kernel an op of ops_ (model/ops/cuda_ops.h).
// Status: ran on an NVIDIA H200 (2026-11-26) as part of gpt_cuda.cu, before this split (a move).
// The split into input and weight halves and the move of its launches into CudaOps have not run on
// a GPU yet; the MoE blocks' backward: compiled, never run on a GPU.
#include "model/gpt_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/gpt_cuda_storage.cuh"

namespace strata::cuda {

template <class T>
typename CudaGpt<T>::Slot& CudaGpt<T>::backward_slot(int slot) {
  const bool held = slot >= 0 && slot < slots();
  check_slot_backward(slot_limits(), held ? slots_[static_cast<std::size_t>(slot)] : SlotState{},
                      slot, partition_.has_head);
  return slots_[static_cast<std::size_t>(slot)];
}

template <class T>
void CudaGpt<T>::backward(int slot, Parameters& parameters, float loss_scale) {
  backward_pass(backward_slot(slot), parameters, loss_scale, false);
}

// Fused: each part's weight half follows its input half at once, through Buffers' one-layer
// stash. Every parameter gradient is added by the same kernel call on the same values as in the
// split backward below, so the two agree bitwise. A stage before the last starts from the output
// gradient its caller wrote into dres.
template <class T>
void CudaGpt<T>::backward_pass(Slot& s, Parameters& parameters, float loss_scale, bool fused) {
  GptWeightStash<T>& w = buffers_->stash;
  s.loss_scale = loss_scale;
  if (partition_.has_head) head_backward_input(s, parameters, loss_scale, fused, w);
  // The tied wte takes gradients from the head and from the embedding: one acquisition spans both.
  float* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
  if (partition_.has_head) {
    head_backward_weight(s, parameters, wte_grads, w);
    if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
  }
  GptStashLayer<T>& layer = w.layers[0];
  for (int l = partition_.layers() - 1; l >= 0; --l) {
    block_backward_input(s, parameters, l, layer);
    block_backward_weight(s, parameters, l, weight_inputs(s, l, layer), layer);
  }
  backward_finish(w, s.batch * s.time);
  if (partition_.has_embedding) {
    embed_backward_weight(s, parameters, wte_grads, w);
    parameters.release_gradients(segment_.wte);
  }
  s.forwarded = false;
}

template <class T>
void CudaGpt<T>::backward_input(int slot, Parameters& parameters, float loss_scale) {
  STRATA_CHECK(split_backward_, "backward_input needs a model built with split_backward");
  Slot& s = backward_slot(slot);
  s.loss_scale = loss_scale;
  if (partition_.has_head) head_backward_input(s, parameters, loss_scale, false, s.stash);
  for (int l = partition_.layers() - 1; l >= 0; --l)
    block_backward_input(s, parameters, l, s.stash.layers[static_cast<std::size_t>(l)]);
  backward_finish(s.stash, s.batch * s.time);
  s.forwarded = false;
  s.weight_pending = true;
}

template <class T>
void CudaGpt<T>::backward_weight(int slot, Parameters& parameters) {
  check_slot_weight_backward(
      slot_limits(),
      slot >= 0 && slot < slots() ? slots_[static_cast<std::size_t>(slot)] : SlotState{}, slot);
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  float* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
  if (partition_.has_head) {
    head_backward_weight(s, parameters, wte_grads, s.stash);
    if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
  }
  for (int l = partition_.layers() - 1; l >= 0; --l) {
    const GptStashLayer<T>& layer = s.stash.layers[static_cast<std::size_t>(l)];
    block_backward_weight(s, parameters, l, weight_inputs(s, l, layer), layer);
  }
  if (partition_.has_embedding) {
    embed_backward_weight(s, parameters, wte_grads, s.stash);
    parameters.release_gradients(segment_.wte);
  }
  s.weight_pending = false;
}

// The head's input half: the logits' gradient (in place of the logits, where the weight half
// reads it), then the final LayerNorm's output gradient (into w.dlnf) and dres, the gradient of
// the stage output.
template <class T>
void CudaGpt<T>::head_backward_input(Slot& s, Parameters& parameters, float loss_scale, bool fused,
                                     GptWeightStash<T>& w) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const VocabShard vocab = vocab_shard();
  Buffers& b = *buffers_;
  if (!fused)  // dlogits overwrite the logits in place, from the forward's row statistics
    ops_.cross_entropy_backward(s.losses, s.ce_stats, s.logits, s.targets, loss_scale, vocab, N);
  // Row-parallel partial sums: added in place when rows are not split, else reduce-scattered.
  T* dlnf_partial = sequence_parallel_ ? b.dln : w.dlnf;
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::backward);
  ops_.matmul_backward_input(dlnf_partial, s.logits, in_segment(wte_weights, segment_.wte, "wte"),
                             nullptr, N, C, vocab.rows);
  parameters.release_weights(segment_.wte);
  ops_.sum_rows(dlnf_partial, w.dlnf, N, C);  // (Nr, C)
  ops_.zero(b.dres, static_cast<std::size_t>(Nr) * C);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::backward);
  ops_.layernorm_backward_input(b.dres, w.dlnf, stage_residual_output(s),
                                in_segment(lnf, segment_.lnf, "lnf.weight"), s.lnf_mean, s.lnf_rstd,
                                Nr, C);
  parameters.release_weights(segment_.lnf);
}

template <class T>
void CudaGpt<T>::head_backward_weight(Slot& s, Parameters& parameters, float* wte_grads,
                                      const GptWeightStash<T>& w) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const T* lnf_full = sequence_parallel_ ? s.lnf_full : s.lnf;
  ops_.matmul_backward_weight(in_segment(wte_grads, segment_.wte, "wte"), nullptr, s.logits,
                              lnf_full, N, C, vocab_shard().rows);
  float* lnf_grads = parameters.acquire_gradients(segment_.lnf);
  ops_.layernorm_backward_weight(in_segment(lnf_grads, segment_.lnf, "lnf.weight"),
                                 in_segment(lnf_grads, segment_.lnf, "lnf.bias"), w.dlnf,
                                 stage_residual_output(s), s.lnf_mean, s.lnf_rstd, Nr, C);
  parameters.release_gradients(segment_.lnf);
}

// The block's input half: dres from d(loss)/d(block output) down to d(loss)/d(block input), after
// recomputing what the forward dropped. Into `stash`: the gradients of both projections' outputs
// (all rows), of the fc output (GELU' fused in its GEMM's epilogue), of qkv and of both LayerNorm
// outputs; and copies of the recomputed activations the weight half reads, where `stash` has room
// for them (a slot's). An MoE block leaves its experts' activation gradients in the slot's
// CudaMoeActivations instead of dfch (a full recompute has rerun its forward into them first).
template <class T>
void CudaGpt<T>::block_backward_input(Slot& s, Parameters& parameters, int l,
                                      GptStashLayer<T>& stash) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int N = B * T_, Nr = activation_rows(B, T_), Cl = C / tp, Hl = 4 * C / tp;
  const int segment = block_segment(l);
  // One acquisition of the weights serves the recomputation and the backward pass.
  const T* w = parameters.acquire_weights(segment, WeightUse::backward);
  auto p = [&](const char* name) { return in_block(w, l, name); };
  Buffers& b = *buffers_;
  const Layer a = layer(s, l, true);
  // Bring back what the forward dropped, by the forward's own code on the same inputs.
  if (recompute_ == Recompute::full)
    block_forward(a, w, l, B, T_);
  else if (recompute_ == Recompute::selective)
    attention_core_forward(a, w, l, B, T_, sequence_parallel_ ? a.ln1_full : a.ln1);
  // The next layer's recomputation overwrites the workspace: keep what the weight half reads.
  auto keep = [&](auto* to, const auto* from, std::size_t count) {
    if (to != nullptr) ops_.copy(to, from, count);
  };
  const std::size_t rows = static_cast<std::size_t>(Nr) * C;
  const std::size_t full = static_cast<std::size_t>(N) * C;
  keep(stash.atty, a.atty, static_cast<std::size_t>(N) * Cl);
  keep(stash.x2, a.x2, rows);
  keep(stash.ln1_full, sequence_parallel_ ? a.ln1_full : a.ln1, full);
  keep(stash.ln2_full, sequence_parallel_ ? a.ln2_full : a.ln2, full);
  keep(stash.fch_gelu, a.fch_gelu, static_cast<std::size_t>(N) * Hl);  // none in an MoE block
  keep(stash.ln1_mean, a.ln1_mean, static_cast<std::size_t>(Nr));
  keep(stash.ln1_rstd, a.ln1_rstd, static_cast<std::size_t>(Nr));
  keep(stash.ln2_mean, a.ln2_mean, static_cast<std::size_t>(Nr));
  keep(stash.ln2_rstd, a.ln2_rstd, static_cast<std::size_t>(Nr));
  // Row-parallel partial sums: added in place when rows are not split, else reduce-scattered.
  auto partial_of = [&](T* local) { return sequence_parallel_ ? b.dln : local; };

  // MLP: out = x2 + [sum](h·Wprojᵀ) + b, h = gelu(fch); dres is d(loss)/d(out). Or the experts:
  // out = x2 + [sum](moe(ln2)), their router losses' gradients scaled like the cross-entropy's.
  ops_.gather_rows_into(b.dres, stash.dz, N, C);  // (N, C)
  T* dln2_partial = partial_of(stash.dln2);
  if (a.moe != nullptr) {
    moe_->backward_input(*a.moe, stash.dz, s.loss_scale, p("moe.router.weight"), dln2_partial);
    MoeTotals::add(moe_totals_.data(), partition_.layer_begin + l, shape_.moe.experts,
                   a.moe->stats);
  } else {
    ops_.matmul_backward_input(stash.dfch, stash.dz, p("mlp.proj.weight"), a.fch, N, Hl,
                               C);  // d/d(fch): GELU' in the epilogue
    ops_.matmul_backward_input(dln2_partial, stash.dfch, p("mlp.fc.weight"), nullptr, N, C, Hl);
  }
  ops_.sum_rows(dln2_partial, stash.dln2, N, C);  // (Nr, C)
  ops_.layernorm_backward_input(b.dres, stash.dln2, a.x2, p("ln2.weight"), a.ln2_mean, a.ln2_rstd,
                                Nr, C);
  // Attention: x2 = x + [sum](atty·Wprojᵀ) + b; dres is now d(loss)/d(x2).
  ops_.gather_rows_into(b.dres, stash.dy, N, C);
  ops_.matmul_backward_input(b.datty, stash.dy, p("attn.proj.weight"), nullptr, N, Cl, C);
  ops_.attention_backward(stash.dqkv, b.datty, a.qkv, a.atty, a.lse, B, T_, Cl, shape_.n_head / tp);
  T* dln1_partial = partial_of(stash.dln1);
  ops_.matmul_backward_input(dln1_partial, stash.dqkv, p("attn.qkv.weight"), nullptr, N, C, 3 * Cl);
  ops_.sum_rows(dln1_partial, stash.dln1, N, C);
  ops_.layernorm_backward_input(b.dres, stash.dln1, a.x, p("ln1.weight"), a.ln1_mean, a.ln1_rstd,
                                Nr, C);
  parameters.release_weights(segment);
}

template <class T>
typename CudaGpt<T>::Layer CudaGpt<T>::weight_inputs(Slot& s, int l,
                                                     const GptStashLayer<T>& stash) const {
  Layer a = layer(s, l, true);
  auto from_stash = [](auto*& at, auto* copy) {
    if (copy != nullptr) at = copy;
  };
  from_stash(a.atty, stash.atty);
  from_stash(a.x2, stash.x2);
  from_stash(sequence_parallel_ ? a.ln1_full : a.ln1, stash.ln1_full);
  from_stash(sequence_parallel_ ? a.ln2_full : a.ln2, stash.ln2_full);
  from_stash(a.fch_gelu, stash.fch_gelu);
  from_stash(a.ln1_mean, stash.ln1_mean);
  from_stash(a.ln1_rstd, stash.ln1_rstd);
  from_stash(a.ln2_mean, stash.ln2_mean);
  from_stash(a.ln2_rstd, stash.ln2_rstd);
  return a;
}

// The block's weight half: every parameter gradient, added (+=) in fp32 by the calls the backward
// made before it was split in two (matmul_backward_weight; layernorm_backward is exactly its two
// halves).
template <class T>
void CudaGpt<T>::block_backward_weight(Slot& s, Parameters& parameters, int l, const Layer& a,
                                       const GptStashLayer<T>& stash) {
  const int C = shape_.d_model, tp = partition_.tp_size;
  const int N = s.batch * s.time, Nr = activation_rows(s.batch, s.time), Cl = C / tp;
  const int Hl = 4 * C / tp;
  float* grads = parameters.acquire_gradients(block_segment(l));
  auto g = [&](const char* name) { return in_block(grads, l, name); };
  const T* ln1_full = sequence_parallel_ ? a.ln1_full : a.ln1;
  const T* ln2_full = sequence_parallel_ ? a.ln2_full : a.ln2;
  // A row-parallel layer's bias is replicated: with sequence parallelism each rank adds its rows'
  // share (the trainer sums replicated gradients over the group), found at their place among the
  // gathered rows of dout (copies of dres, bit for bit); otherwise (all N rows) the GEMM's
  // epilogue adds the whole from the same pass.
  const RowRange own_rows{sequence_parallel_ ? partition_.tp_rank * Nr : 0, Nr};

  if (a.moe != nullptr) {
    // The router's weight gradient reads the block's ln2 rows: where this half finds them (the
    // same values the forward routed; under a split full recompute the stash's copy, the workspace
    // the forward's pointer names holding another layer by now). The router over this rank's own
    // rows, the proj biases on the rank whose own rows start at 0 (model/moe/moe_layer.h).
    a.moe->x = ln2_full;
    moe_->backward_weight(*a.moe, g("moe.router.weight"),
                          sequence_parallel_ ? partition_.tp_rank * Nr : 0,
                          sequence_parallel_ ? Nr : N);
  } else {
    ops_.matmul_backward_weight_rows(g("mlp.proj.weight"), g("mlp.proj.bias"), stash.dz, a.fch_gelu,
                                     N, Hl, C, own_rows);
    ops_.matmul_backward_weight(g("mlp.fc.weight"), g("mlp.fc.bias"), stash.dfch, ln2_full, N, C,
                                Hl);
  }
  ops_.layernorm_backward_weight(g("ln2.weight"), g("ln2.bias"), stash.dln2, a.x2, a.ln2_mean,
                                 a.ln2_rstd, Nr, C);
  ops_.matmul_backward_weight_rows(g("attn.proj.weight"), g("attn.proj.bias"), stash.dy, a.atty, N,
                                   Cl, C, own_rows);
  ops_.matmul_backward_weight(g("attn.qkv.weight"), g("attn.qkv.bias"), stash.dqkv, ln1_full, N, C,
                              3 * Cl);
  ops_.layernorm_backward_weight(g("ln1.weight"), g("ln1.bias"), stash.dln1, a.x, a.ln1_mean,
                                 a.ln1_rstd, Nr, C);
  parameters.release_gradients(block_segment(l));
}

template <class T>
void CudaGpt<T>::backward_finish(GptWeightStash<T>& w, int N) {
  if (partition_.has_embedding)
    ops_.gather_rows_into(buffers_->dres, w.dembed, N, shape_.d_model);  // (N, C)
}

template <class T>
void CudaGpt<T>::embed_backward_weight(Slot& s, Parameters& parameters, float* wte_grads,
                                       const GptWeightStash<T>& w) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nr : 0;
  float* wpe_grads = parameters.acquire_gradients(segment_.wpe);
  ops_.position_embedding_backward(in_segment(wpe_grads, segment_.wpe, "wpe"),
                                   w.dembed + row_begin * C, row_begin, Nr, s.time, C);
  parameters.release_gradients(segment_.wpe);
  ops_.embedding_backward(in_segment(wte_grads, segment_.wte, "wte"), w.dembed, s.tokens,
                          vocab_shard(), N, C);
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda
