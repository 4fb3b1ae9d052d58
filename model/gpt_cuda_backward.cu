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
    block_backward_weight(s, parameters, l, layer);
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
    block_backward_weight(s, parameters, l, s.stash.layers[static_cast<std::size_t>(l)]);
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

// The block's input half (GptBlock::backward_input): dres from d(loss)/d(block output) down to
// d(loss)/d(block input), after recomputing what the forward dropped, the gradients and copies
// the weight half reads into `stash`. One acquisition of the weights serves the recomputation and
// the backward pass.
template <class T>
void CudaGpt<T>::block_backward_input(Slot& s, Parameters& parameters, int l,
                                      GptStashLayer<T>& stash) {
  const int segment = block_segment(l);
  const typename Block::Weights p(parameters.acquire_weights(segment, WeightUse::backward),
                                  block_offsets_[static_cast<std::size_t>(l)]);
  block().backward_input(layer(s, l, true), stash, p, s.batch, s.time, s.loss_scale,
                         moe_totals_.data(), partition_.layer_begin + l);
  parameters.release_weights(segment);
}

// The block's weight half: every parameter gradient, added (+=) in fp32 by the calls the backward
// made before it was split in two (matmul_backward_weight; layernorm_backward is exactly its two
// halves).
template <class T>
void CudaGpt<T>::block_backward_weight(Slot& s, Parameters& parameters, int l,
                                       const GptStashLayer<T>& stash) {
  const int segment = block_segment(l);
  const typename Block::Grads g(parameters.acquire_gradients(segment),
                                block_offsets_[static_cast<std::size_t>(l)]);
  block().backward_weight(Block::weight_inputs(layer(s, l, true), stash, sequence_parallel_), stash,
                          g, s.batch * s.time);
  parameters.release_gradients(segment);
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
