#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "model/activation_sizes.h"
#include "model/core/error.h"
#include "model/gpt_storage.h"

namespace strata {

Recompute recompute_from_name(std::string_view name) {
  if (const auto recompute = kRecomputeChoices.find(name)) return *recompute;
  fail("unknown recompute mode '", name, "' (expected ", kRecomputeChoices.list(), ")");
}

const char* recompute_name(Recompute recompute) {
  return kRecomputeChoices.word(recompute).data();  // the table's words are string literals
}

template <class T>
Gpt<T>::Gpt(const GptShape& shape, int max_batch, const GptOptions& options)
    : Gpt(shape, ModelPartition::whole(shape), nullptr, max_batch, 1, options) {}

template <class T>
Gpt<T>::Gpt(const GptShape& shape, const ModelPartition& partition, Collectives* tp, int max_batch,
            int slots, const GptOptions& options, Collectives* ep)
    : shape_(shape),
      partition_(partition),
      layout_(ParameterLayout::for_partition(shape, partition)),
      segments_(layout_.segments()),
      segment_(segment_index(segments_)),
      single_rank_(tp == nullptr ? std::make_unique<SingleRank>() : nullptr),
      tp_(tp == nullptr ? single_rank_.get() : tp),
      max_batch_(max_batch),
      options_(options),
      ops_(options.compute, tp_, partition.sequence_parallel) {
  STRATA_CHECK(max_batch > 0 && slots > 0 && shape.d_model % shape.n_head == 0);
  STRATA_CHECK(partition.chunks() == 1, "a model computes one chunk of layers (partition.chunk)");
  STRATA_CHECK(tp != nullptr || partition.tp_size == 1,
               "a tensor-parallel partition needs its group");
  STRATA_CHECK(tp_->size() == partition.tp_size && tp_->rank() == partition.tp_rank);
  const int tp_size = partition.tp_size;
  STRATA_CHECK(shape.n_head % tp_size == 0 && shape.padded_vocab() % tp_size == 0,
               "tensor parallelism of ", tp_size, " does not divide the heads or the vocabulary");
  sequence_parallel_ = partition.sequence_parallel && tp_size > 1;
  if (layout_.has("wte")) {
    const TensorView& wte = layout_.at("wte");
    vocab_ = {static_cast<int>(wte.slice.mid_begin), static_cast<int>(wte.slice.mid_count),
              shape.vocab_size};
  }
  if (shape.moe.enabled()) {
    STRATA_CHECK(ep == nullptr ? partition.ep_size == 1
                               : ep->size() == partition.ep_size && ep->rank() == partition.ep_rank,
                 "an expert-parallel partition needs its group");
    moe_ = std::make_unique<MoeLayer<T>>(shape.d_model, shape.moe, tp_, options.compute, ep);
    moe_totals_.assign(shape.n_layer * MoeTotals::stride(shape.moe.experts), 0.0);
  }
  for (int l = 0; l < partition.layers(); ++l) {
    dense_index_.push_back(dense_layers_);
    if (!is_moe(l)) ++dense_layers_;
    block_offsets_.push_back(BlockOffsets::of(layout_, segments_[block_segment(l)],
                                              partition.layer_begin + l, is_moe(l)));
  }
  for (int i = 0; i < slots; ++i) slots_.push_back(std::make_unique<Slot>());
  scratch_ = std::make_unique<Scratch>();
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t C = shape.d_model, Cl = C / tp_size;
  const std::size_t Nl = sequence_parallel_ ? N / tp_size : N;
  Scratch& x = *scratch_;
  x.dresidual.resize(Nl * C);
  x.dfull.resize(N * C);
  x.partial.resize(N * C);
  x.reduced.resize(Nl * C);
  x.datty.resize(N * Cl);
  allocate_stash(x.stash, 1, 1, false);
  // The workspace holds one layer of what the slots drop.
  const bool drops_attention = options_.recompute != Recompute::none;
  const bool drops_rest = options_.recompute == Recompute::full;
  allocate(x.recomputed, drops_attention ? 1 : 0, drops_rest ? 1 : 0,
           drops_rest && dense_layers_ > 0 ? 1 : 0);
  if (drops_rest) x.recomputed_output.resize(Nl * C);
  STRATA_CHECK(x.recomputed.elements() + x.recomputed_output.size() ==
               activation_elements(shape, partition, max_batch, options_.recompute).workspace);
}

template <class T>
void Gpt<T>::allocate(LayerActivations& a, std::size_t attention_layers, std::size_t other_layers,
                      std::size_t mlp_layers) const {
  const std::size_t tp = partition_.tp_size;
  const std::size_t N = static_cast<std::size_t>(max_batch_) * shape_.seq_len;
  const std::size_t C = shape_.d_model, Cl = C / tp, Hl = 4 * C / tp;
  const std::size_t Nl = sequence_parallel_ ? N / tp : N;
  a.qkv.resize(attention_layers * N * 3 * Cl);
  a.atty.resize(attention_layers * N * Cl);
  a.residual2.resize(other_layers * Nl * C);
  a.ln1.resize(other_layers * Nl * C);
  a.ln2.resize(other_layers * Nl * C);
  if (sequence_parallel_) {
    a.ln1_full.resize(other_layers * N * C);
    a.ln2_full.resize(other_layers * N * C);
  }
  for (std::vector<T>* stats : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd})
    stats->resize(other_layers * Nl);
  a.fch.resize(mlp_layers * N * Hl);
  a.fch_gelu.resize(mlp_layers * N * Hl);
}

template <class T>
void Gpt<T>::allocate_stash(WeightStash& w, std::size_t layers, std::size_t mlp_layers,
                            bool copies) const {
  const std::size_t tp = partition_.tp_size;
  const std::size_t N = static_cast<std::size_t>(max_batch_) * shape_.seq_len;
  const std::size_t C = shape_.d_model, Cl = C / tp, Hl = 4 * C / tp;
  const std::size_t Nl = sequence_parallel_ ? N / tp : N;
  w.dz.resize(layers * N * C);
  w.dy.resize(layers * N * C);
  w.dfch.resize(mlp_layers * N * Hl);
  w.dqkv.resize(layers * N * 3 * Cl);
  w.dln1.resize(layers * Nl * C);
  w.dln2.resize(layers * Nl * C);
  const std::size_t attention = copies && options_.recompute != Recompute::none ? layers : 0;
  const std::size_t rest = copies && options_.recompute == Recompute::full ? layers : 0;
  const std::size_t mlp_rest = rest > 0 ? mlp_layers : 0;
  w.atty.resize(attention * N * Cl);
  w.x2.resize(rest * Nl * C);
  w.ln1_full.resize(rest * N * C);
  w.ln2_full.resize(rest * N * C);
  w.fch_gelu.resize(mlp_rest * N * Hl);
  w.ln_stats.resize(rest * 4 * Nl);
  if (partition_.has_head) w.dlnf.resize(Nl * C);
  if (partition_.has_embedding) w.dembed.resize(N * C);
}

template <class T>
Gpt<T>::~Gpt() = default;
template <class T>
Gpt<T>::Gpt(Gpt&&) noexcept = default;
template <class T>
Gpt<T>& Gpt<T>::operator=(Gpt&&) noexcept = default;

template <class T>
int Gpt<T>::slots() const {
  return static_cast<int>(slots_.size());
}

template <class T>
SlotLimits Gpt<T>::slot_limits() const {
  return {slots(), max_batch_, shape_.seq_len, sequence_parallel_ ? partition_.tp_size : 1};
}

template <class T>
int Gpt<T>::activation_rows(int B, int T_) const {
  return sequence_parallel_ ? B * T_ / partition_.tp_size : B * T_;
}

template <class T>
typename Gpt<T>::Slot& Gpt<T>::slot_for(int slot, int B, int T_) {
  check_slot_batch(slot_limits(), slot, B, T_);
  Slot& s = *slots_[slot];
  if (s.residual.empty()) {  // first use: allocate for the largest micro-batch
    const std::size_t L = partition_.layers(), tp = partition_.tp_size;
    const std::size_t N = static_cast<std::size_t>(max_batch_) * shape_.seq_len;
    const std::size_t C = shape_.d_model;
    const std::size_t Nl = sequence_parallel_ ? N / tp : N;
    s.residual.resize((L + 1) * Nl * C);
    if (moe_) s.moe.resize(L);  // each MoE layer's buffers grow at its first forward
    const bool keeps_rest = options_.recompute != Recompute::full;
    allocate(s.layers, options_.recompute == Recompute::none ? L : 0, keeps_rest ? L : 0,
             keeps_rest ? static_cast<std::size_t>(dense_layers_) : 0);
    if (partition_.has_head) {
      s.lnf.resize(Nl * C);
      if (sequence_parallel_) s.lnf_full.resize(N * C);
      s.lnf_mean.resize(Nl);
      s.lnf_rstd.resize(Nl);
      s.logits.resize(N * shape_.padded_vocab() / tp);
      s.losses.resize(N);
    }
    if (!partition_.has_embedding) s.input_grad.resize(Nl * C);
    if (options_.split_backward)
      allocate_stash(s.stash, L, static_cast<std::size_t>(dense_layers_), true);
    STRATA_CHECK(s.elements() == activation_elements(shape_, partition_, max_batch_,
                                                     options_.recompute, options_.split_backward)
                                     .per_slot);
  }
  s.batch = B;
  s.time = T_;
  return s;
}

template <class T>
T Gpt<T>::forward(int slot, ParameterAccess<T>& parameters, const std::int32_t* tokens,
                  const T* input, const std::int32_t* targets, int B, int T_) {
  if (slot >= 0 && slot < slots()) check_slot_free(*slots_[slot], slot);
  Slot& s = slot_for(slot, B, T_);
  const long N = static_cast<long>(B) * T_;
  const int C = shape_.d_model;
  s.has_targets = partition_.has_head && targets != nullptr;
  if (partition_.has_embedding) {
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
    s.tokens.assign(tokens, tokens + N);
  }
  if (s.has_targets) s.targets.assign(targets, targets + N);
  if (partition_.has_embedding) {
    embed(s, parameters);
  } else {
    STRATA_CHECK(input != nullptr, "a stage after the first needs its input activation");
    std::copy_n(input, static_cast<long>(activation_rows(B, T_)) * C, s.residual.data());
  }
  for (int l = 0; l < partition_.layers(); ++l) {
    const T* weights = parameters.acquire_weights(block_segment(l), WeightUse::forward);
    block().forward(block_activations(s, l, false), B, T_,
                    typename Block::Weights(weights, block_offsets_[static_cast<std::size_t>(l)]));
    parameters.release_weights(block_segment(l));
  }
  s.forwarded = true;
  return partition_.has_head ? head_forward(s, parameters) : T(0);
}

template <class T>
void Gpt<T>::embed(Slot& s, ParameterAccess<T>& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  // Each rank looks up the tokens of its vocabulary rows (zeros elsewhere); the sum over the
  // group is the embedding. Without sequence parallelism straight into the residual stream.
  T* lookup = sequence_parallel_ ? scratch_->partial.data() : s.residual.data();
  ops_.embedding_forward(lookup, s.tokens.data(),
                         parameters.acquire_weights(segment_.wte, WeightUse::forward), vocab_, N,
                         C);  // (N, C)
  parameters.release_weights(segment_.wte);
  ops_.sum_rows(lookup, s.residual.data(), N, C);  // (Nl, C), in the residual stream either way
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nl : 0;
  ops_.position_embedding_forward(s.residual.data(),
                                  parameters.acquire_weights(segment_.wpe, WeightUse::forward),
                                  row_begin, Nl, s.time, C);
  parameters.release_weights(segment_.wpe);
}

template <class T>
T Gpt<T>::head_forward(Slot& s, ParameterAccess<T>& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time;
  const int Nl = activation_rows(s.batch, s.time);
  const T* x = s.residual.data() + static_cast<long>(partition_.layers()) * Nl * C;
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::forward);
  ops_.layernorm_forward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x,
                         in_segment(lnf, segment_.lnf, "lnf.weight"),
                         in_segment(lnf, segment_.lnf, "lnf.bias"), Nl, C);
  parameters.release_weights(segment_.lnf);
  const T* lnf_full = ops_.gather_rows(s.lnf.data(), s.lnf_full.data(), N, C);
  // (N, Vl), the head tied to wte; the loss is computed in T from the rounded logits (as fused
  // classifier kernels do).
  ops_.matmul_forward(s.logits.data(), nullptr, lnf_full,
                      parameters.acquire_weights(segment_.wte, WeightUse::forward), nullptr, N, C,
                      vocab_.rows, Epilogue::bias);
  parameters.release_weights(segment_.wte);
  if (!s.has_targets) return T(0);
  ops_.cross_entropy_forward(s.losses.data(), nullptr, s.logits.data(), s.targets.data(), vocab_,
                             N);
  T sum = 0;
  for (int i = 0; i < N; ++i) sum += s.losses[i];
  return sum / static_cast<T>(N);
}

// The backward pass runs in parts: the head's, each block's (last to first) and the embedding's.
// Each part's input half computes the activation gradients and leaves in a stash what its weight
// half reads. Fused, each weight half follows its input half at once through Scratch's one-layer
// stash; split, every input half runs first (backward_input) and the weight halves later
// (backward_weight) from the slot's stash. Either way every parameter gradient is added by the
// same kernel calls on the same values, so the two agree bitwise.
template <class T>
typename Gpt<T>::Slot& Gpt<T>::backward_slot(int slot) {
  check_slot_backward(slot_limits(), slot >= 0 && slot < slots() ? *slots_[slot] : SlotState{},
                      slot, partition_.has_head);
  return *slots_[slot];
}

template <class T>
void Gpt<T>::backward(int slot, ParameterAccess<T>& parameters, const T* output_grad,
                      T loss_scale) {
  Slot& s = backward_slot(slot);
  WeightStash& w = scratch_->stash;
  backward_start(s, parameters, output_grad, loss_scale, w);
  // The tied wte takes gradients from the head and from the embedding: one acquisition spans both.
  T* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
  if (partition_.has_head) {
    head_backward_weight(s, parameters, wte_grads, w);
    if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
  }
  for (int l = partition_.layers() - 1; l >= 0; --l) {
    block_backward_input(s, parameters, l, w, 0);
    block_backward_weight(s, parameters, l, w, 0);
  }
  backward_finish(s, w);
  if (partition_.has_embedding) {
    embed_backward_weight(s, parameters, wte_grads, w);
    parameters.release_gradients(segment_.wte);
  }
  s.forwarded = false;  // the probabilities were overwritten by their gradient
}

template <class T>
void Gpt<T>::backward_input(int slot, ParameterAccess<T>& parameters, const T* output_grad,
                            T loss_scale) {
  STRATA_CHECK(options_.split_backward, "backward_input needs a model built with split_backward");
  Slot& s = backward_slot(slot);
  backward_start(s, parameters, output_grad, loss_scale, s.stash);
  for (int l = partition_.layers() - 1; l >= 0; --l)
    block_backward_input(s, parameters, l, s.stash, l);
  backward_finish(s, s.stash);
  s.forwarded = false;
  s.weight_pending = true;
}

template <class T>
void Gpt<T>::backward_weight(int slot, ParameterAccess<T>& parameters) {
  check_slot_weight_backward(slot_limits(),
                             slot >= 0 && slot < slots() ? *slots_[slot] : SlotState{}, slot);
  Slot& s = *slots_[slot];
  T* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
  if (partition_.has_head) {
    head_backward_weight(s, parameters, wte_grads, s.stash);
    if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
  }
  for (int l = partition_.layers() - 1; l >= 0; --l)
    block_backward_weight(s, parameters, l, s.stash, l);
  if (partition_.has_embedding) {
    embed_backward_weight(s, parameters, wte_grads, s.stash);
    parameters.release_gradients(segment_.wte);
  }
  s.weight_pending = false;
}

template <class T>
void Gpt<T>::backward_start(Slot& s, ParameterAccess<T>& parameters, const T* output_grad,
                            T loss_scale, WeightStash& w) {
  s.loss_scale = loss_scale;
  if (partition_.has_head) {
    head_backward_input(s, parameters, loss_scale, w);
  } else {
    STRATA_CHECK(output_grad != nullptr, "a stage before the last needs its output gradient");
    ops_.copy(scratch_->dresidual.data(), output_grad,
              static_cast<std::size_t>(activation_rows(s.batch, s.time)) * shape_.d_model);
  }
}

template <class T>
void Gpt<T>::backward_finish(Slot& s, WeightStash& w) {
  const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  if (partition_.has_embedding)  // the embedding's weight half reads all rows of its gradient
    ops_.gather_rows_into(scratch_->dresidual.data(), w.dembed.data(), N, C);
  else
    ops_.copy(s.input_grad.data(), scratch_->dresidual.data(), static_cast<std::size_t>(Nl) * C);
}

template <class T>
void Gpt<T>::head_backward_input(Slot& s, ParameterAccess<T>& parameters, T loss_scale,
                                 WeightStash& w) {
  const int C = shape_.d_model, N = s.batch * s.time;
  const int Nl = activation_rows(s.batch, s.time);
  Scratch& x = *scratch_;
  // dlogits overwrite the probabilities in place (and stay there for the weight half).
  ops_.cross_entropy_backward(s.losses.data(), nullptr, s.logits.data(), s.targets.data(),
                              loss_scale, vocab_, N);
  // Partial sums over the vocabulary shards, summed in place when the rows are not split.
  T* partial = sequence_parallel_ ? x.dfull.data() : w.dlnf.data();
  ops_.matmul_backward_input(partial, s.logits.data(),
                             parameters.acquire_weights(segment_.wte, WeightUse::backward), nullptr,
                             N, C, vocab_.rows);
  parameters.release_weights(segment_.wte);
  ops_.sum_rows(partial, w.dlnf.data(), N, C);  // (Nl, C) into the stash
  ops_.zero(x.dresidual.data(), static_cast<std::size_t>(Nl) * C);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::backward);
  ops_.layernorm_backward_input(x.dresidual.data(), w.dlnf.data(),
                                s.residual.data() + static_cast<long>(partition_.layers()) * Nl * C,
                                in_segment(lnf, segment_.lnf, "lnf.weight"), s.lnf_mean.data(),
                                s.lnf_rstd.data(), Nl, C);
  parameters.release_weights(segment_.lnf);
}

template <class T>
void Gpt<T>::head_backward_weight(Slot& s, ParameterAccess<T>& parameters, T* wte_grads,
                                  const WeightStash& w) {
  const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  const T* lnf_full = sequence_parallel_ ? s.lnf_full.data() : s.lnf.data();
  ops_.matmul_backward_weight(wte_grads, nullptr, s.logits.data(), lnf_full, N, C, vocab_.rows);
  T* lnf_grads = parameters.acquire_gradients(segment_.lnf);
  ops_.layernorm_backward_weight(
      in_segment(lnf_grads, segment_.lnf, "lnf.weight"),
      in_segment(lnf_grads, segment_.lnf, "lnf.bias"), w.dlnf.data(),
      s.residual.data() + static_cast<long>(partition_.layers()) * Nl * C, s.lnf_mean.data(),
      s.lnf_rstd.data(), Nl, C);
  parameters.release_gradients(segment_.lnf);
}

template <class T>
void Gpt<T>::embed_backward_weight(Slot& s, ParameterAccess<T>& parameters, T* wte_grads,
                                   const WeightStash& w) {
  const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nl : 0;
  ops_.position_embedding_backward(parameters.acquire_gradients(segment_.wpe),
                                   w.dembed.data() + row_begin * C, row_begin, Nl, s.time, C);
  parameters.release_gradients(segment_.wpe);
  ops_.embedding_backward(wte_grads, w.dembed.data(), s.tokens.data(), vocab_, N, C);
}

template <class T>
const T* Gpt<T>::output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_head);
  const Slot& s = *slots_[slot];
  return s.residual.data() +
         static_cast<long>(partition_.layers()) * activation_rows(s.batch, s.time) * shape_.d_model;
}

template <class T>
const T* Gpt<T>::input_grad(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_embedding);
  return slots_[slot]->input_grad.data();
}

template <class T>
const T* Gpt<T>::losses(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && partition_.has_head);
  return slots_[slot]->losses.data();
}

template <class T>
std::size_t Gpt<T>::activation_bytes() const {
  std::size_t elements = scratch_->recomputed.elements() + scratch_->recomputed_output.size();
  for (const auto& s : slots_) elements += s->elements();
  return elements * sizeof(T);
}

template <class T>
std::size_t Gpt<T>::activation_bytes_per_layer() const {
  const std::size_t L = partition_.layers();
  if (L == 0) return 0;
  std::size_t elements = 0;
  for (const auto& s : slots_)  // residual: L block inputs and the stage output
    elements += s->layers.elements() / L + s->residual.size() / (L + 1);
  return elements * sizeof(T);
}

template <class T>
const T* Gpt<T>::logits(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && partition_.has_head);
  return slots_[slot]->logits.data();
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace strata
