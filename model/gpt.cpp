#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "model/activation_sizes.h"
#include "model/core/error.h"

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

// Before the storage is laid out (GptPasses's constructor): the shape and partition it is laid
// out from.
template <class T>
ModelPartition Gpt<T>::checked(const GptShape& shape, const ModelPartition& partition,
                               Collectives* tp, int max_batch, int slots, Collectives* ep,
                               Collectives* cp) {
  STRATA_CHECK(max_batch > 0 && slots > 0 && shape.d_model % shape.n_head == 0);
  STRATA_CHECK(partition.chunks() == 1, "a model computes one chunk of layers (partition.chunk)");
  STRATA_CHECK(tp != nullptr || partition.tp_size == 1,
               "a tensor-parallel partition needs its group");
  STRATA_CHECK(tp == nullptr ||
               (tp->size() == partition.tp_size && tp->rank() == partition.tp_rank));
  const int tp_size = partition.tp_size;
  STRATA_CHECK(shape.n_head % tp_size == 0 && shape.padded_vocab() % tp_size == 0,
               "tensor parallelism of ", tp_size, " does not divide the heads or the vocabulary");
  if (shape.moe.enabled())
    STRATA_CHECK(ep == nullptr ? partition.ep_size == 1
                               : ep->size() == partition.ep_size && ep->rank() == partition.ep_rank,
                 "an expert-parallel partition needs its group");
  const ContextChunks& context = partition.context;
  if (context.split()) {
    STRATA_CHECK(cp != nullptr && cp->size() == context.cp && cp->rank() == context.rank,
                 "a context-parallel partition needs its group");
    STRATA_CHECK(!shape.moe.enabled(),
                 "context parallelism with experts: their capacity groups are whole sequences");
    STRATA_CHECK(shape.seq_len % (2 * context.cp) == 0, "context parallelism of ", context.cp,
                 " does not cut seq_len ", shape.seq_len, " into 2·cp equal chunks");
  }
  return partition;
}

template <class T>
Gpt<T>::Gpt(const GptShape& shape, const ModelPartition& partition, Collectives* tp, int max_batch,
            int slots, const GptOptions& options, Collectives* ep, Collectives* cp)
    : Passes(shape, checked(shape, partition, tp, max_batch, slots, ep, cp),
             {max_batch, slots, options.recompute, options.split_backward, true}),
      single_rank_(tp == nullptr ? std::make_unique<SingleRank>() : nullptr),
      tp_(tp == nullptr ? single_rank_.get() : tp),
      options_(options),
      ops_(options.compute, tp_, sequence_parallel_, partition.context.split() ? cp : nullptr) {
  if (shape.moe.enabled()) {
    moe_ = std::make_unique<MoeLayer<T>>(shape.expert_shape(), shape.moe, tp_, options.compute, ep);
    storage_.lay_out_moe(*moe_);
  }
  if (partition.context.split()) this->attend_across(*cp, options.context_comm);
  this->find_block_offsets();
  this->multiply_in_fp8(options.fp8);
  // The planner's formula (model/activation_sizes.h) describes this storage exactly.
  const ActivationElements expected =
      activation_elements(shape, partition, max_batch, options.recompute, options.split_backward);
  STRATA_CHECK(storage_.slot_bytes() == expected.per_slot * sizeof(T) &&
               storage_.workspace_bytes() == expected.workspace * sizeof(T));
}

template <class T>
Gpt<T>::~Gpt() = default;
template <class T>
Gpt<T>::Gpt(Gpt&&) noexcept = default;
template <class T>
Gpt<T>& Gpt<T>::operator=(Gpt&&) noexcept = default;

template <class T>
T Gpt<T>::forward(int slot, ParameterAccess<T>& parameters, const std::int32_t* tokens,
                  const T* input, const std::int32_t* targets, int B, int T_) {
  Slot& s = this->slot_for(slot, B, T_);
  const long N = static_cast<long>(B) * T_;
  s.has_targets = partition_.has_head && targets != nullptr;
  if (partition_.has_embedding) {
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
    std::copy_n(tokens, N, s.tokens);
  } else {
    STRATA_CHECK(input != nullptr, "a stage after the first needs its input activation");
    ops_.copy(s.residual, input,
              static_cast<std::size_t>(this->activation_rows(B, T_)) * shape_.d_model);
  }
  if (s.has_targets) std::copy_n(targets, N, s.targets);
  this->forward_pass(s, parameters);
  if (!s.has_targets) return T(0);
  T sum = 0;  // the mean in T, over the B·T_ positions
  for (long i = 0; i < N; ++i) sum += s.losses[i];
  return sum / static_cast<T>(N);
}

template <class T>
void Gpt<T>::take_output_grad(const Slot& s, const T* output_grad) {
  if (partition_.has_head) return;  // the loss starts the pass
  STRATA_CHECK(output_grad != nullptr, "a stage before the last needs its output gradient");
  ops_.copy(storage_.buffers().dres, output_grad,
            static_cast<std::size_t>(this->activation_rows(s.batch, s.time)) * shape_.d_model);
}

template <class T>
void Gpt<T>::backward(int slot, ParameterAccess<T>& parameters, const T* output_grad,
                      T loss_scale) {
  take_output_grad(this->backward_slot(slot), output_grad);
  Passes::backward(slot, parameters, loss_scale);
}

template <class T>
void Gpt<T>::backward_input(int slot, ParameterAccess<T>& parameters, const T* output_grad,
                            T loss_scale) {
  take_output_grad(this->backward_slot(slot), output_grad);
  Passes::backward_input(slot, parameters, loss_scale);
}

template <class T>
const T* Gpt<T>::output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots() && !partition_.has_head);
  return storage_.stage_output(storage_.slot(slot));
}

template <class T>
const T* Gpt<T>::input_grad(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots() && !partition_.has_embedding);
  return storage_.slot(slot).input_grad;
}

template <class T>
const T* Gpt<T>::losses(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots() && partition_.has_head);
  return storage_.slot(slot).losses;
}

template <class T>
const T* Gpt<T>::logits(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots() && partition_.has_head);
  return storage_.slot(slot).logits;
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace strata
