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
    : Passes(shape, partition, options.recompute),
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
  if (shape.moe.enabled()) {
    STRATA_CHECK(ep == nullptr ? partition.ep_size == 1
                               : ep->size() == partition.ep_size && ep->rank() == partition.ep_rank,
                 "an expert-parallel partition needs its group");
    moe_ = std::make_unique<MoeLayer<T>>(shape.d_model, shape.moe, tp_, options.compute, ep);
  }
  this->find_block_offsets();
  for (int l = 0; l < partition.layers(); ++l) {
    dense_index_.push_back(dense_layers_);
    if (!is_moe(l)) ++dense_layers_;
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
  s.has_targets = partition_.has_head && targets != nullptr;
  if (partition_.has_embedding) {
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
    s.tokens.assign(tokens, tokens + N);
  } else {
    STRATA_CHECK(input != nullptr, "a stage after the first needs its input activation");
    ops_.copy(s.residual.data(), input,
              static_cast<std::size_t>(this->activation_rows(B, T_)) * shape_.d_model);
  }
  if (s.has_targets) s.targets.assign(targets, targets + N);
  this->forward_pass(s, parameters);
  if (!s.has_targets) return T(0);
  T sum = 0;  // the mean in T, over the B·T_ positions
  for (long i = 0; i < N; ++i) sum += s.losses[i];
  return sum / static_cast<T>(N);
}

template <class T>
typename Gpt<T>::Slot& Gpt<T>::backward_slot(int slot) {
  check_slot_backward(slot_limits(), slot >= 0 && slot < slots() ? *slots_[slot] : SlotState{},
                      slot, partition_.has_head);
  return *slots_[slot];
}

template <class T>
void Gpt<T>::take_output_grad(const Slot& s, const T* output_grad) {
  if (partition_.has_head) return;  // the loss starts the pass
  STRATA_CHECK(output_grad != nullptr, "a stage before the last needs its output gradient");
  ops_.copy(scratch_->dresidual.data(), output_grad,
            static_cast<std::size_t>(this->activation_rows(s.batch, s.time)) * shape_.d_model);
}

template <class T>
void Gpt<T>::backward(int slot, ParameterAccess<T>& parameters, const T* output_grad,
                      T loss_scale) {
  Slot& s = backward_slot(slot);
  take_output_grad(s, output_grad);
  this->backward_pass(s, parameters, loss_scale, false);
}

template <class T>
void Gpt<T>::backward_input(int slot, ParameterAccess<T>& parameters, const T* output_grad,
                            T loss_scale) {
  STRATA_CHECK(options_.split_backward, "backward_input needs a model built with split_backward");
  Slot& s = backward_slot(slot);
  take_output_grad(s, output_grad);
  this->backward_input_pass(s, parameters, loss_scale);
}

template <class T>
void Gpt<T>::backward_weight(int slot, ParameterAccess<T>& parameters) {
  check_slot_weight_backward(slot_limits(),
                             slot >= 0 && slot < slots() ? *slots_[slot] : SlotState{}, slot);
  this->backward_weight_pass(*slots_[slot], parameters);
}

template <class T>
T* Gpt<T>::stage_output(const Slot& s) const {
  return const_cast<T*>(s.residual.data()) + static_cast<long>(partition_.layers()) *
                                                 this->activation_rows(s.batch, s.time) *
                                                 shape_.d_model;
}

template <class T>
typename Gpt<T>::WeightStash& Gpt<T>::fused_stash() {
  return scratch_->stash;
}

template <class T>
GptBlockBuffers<T> Gpt<T>::buffers() {
  Scratch& x = *scratch_;
  return {x.partial.data(), x.reduced.data(), x.dresidual.data(), x.dfull.data(), x.datty.data()};
}

template <class T>
const T* Gpt<T>::output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_head);
  return stage_output(*slots_[slot]);
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
