// GPT-2 (docs/ARCHITECTURE.md §5): token + learned position embeddings, n_layer pre-LN blocks
// (LN → causal MHA → residual, LN → MLP 4C with tanh-GELU → residual), final LN, LM head tied to
// wte. Explicit forward and backward; activations are kept for the backward pass.
//
// A Gpt<T> computes the part of the model one rank holds (ModelPartition): a pipeline stage's
// contiguous layers, and within them a Megatron tensor-parallel shard:
//   attention:  ln1 → [gather rows] → qkv (column-parallel: this rank's heads) → attention
//               → proj (row-parallel: partial sums) → [sum over the group] → + bias + residual
//   MLP:        ln2 → [gather rows] → fc (column-parallel) → GELU → proj (row-parallel) → [sum]
//   embedding:  vocabulary-parallel lookup → [sum] → + positions
//   head:       lnf → [gather rows] → logits of this rank's vocabulary rows → cross-entropy
//               from per-shard maxima and sums (no rank holds full logits)
// "[sum]" is an all-reduce, or with sequence parallelism a reduce-scatter that leaves each rank
// its block of the B·T rows, and "[gather rows]" the matching all-gather (identity otherwise);
// the backward pass applies the conjugates. Activations outside attention and MLP (residual
// stream, LayerNorms) are then (B·T / tp, C) per rank.
//
// Activation memory comes in slots: slot s holds one micro-batch from its forward until its
// backward, so a pipeline schedule can keep several micro-batches in flight; every slot and the
// shared buffers are laid out at construction in one block of host memory (model/gpt_storage.h,
// the storage both backends share; pages are zero until first touched). Parameters and
// gradients are flat buffers laid out by layout() and are passed in, so the same object serves
// training (float) and finite-difference checks (double).
//
// Activation checkpointing (GptOptions::recompute) trades compute for that memory: `selective`
// drops each block's attention internals (qkv, the (T, T) probabilities, the output before the
// projection) and recomputes them from the kept LayerNorm output in the block's backward; `full`
// keeps only the residual stream entering each block and reruns the block's whole forward
// (tensor-parallel collectives included) in its backward. Both rerun the forward's own code into a
// one-layer workspace, so gradients are bitwise those of `none`.
//
// Mixed precision (GptOptions::compute, ARCHITECTURE §6) is emulated: `params` is expected to be
// the caller's rounded copy of the fp32 master weights, and every op output the model stores and
// every activation gradient it passes backward is rounded to the compute dtype where a GPU kernel
// would write it, by the op that wrote it (model/ops/cpu_ops.h: the model's passes call nothing
// else); GEMMs and reductions accumulate in T, parameter gradients accumulate in T. fp32 rounds
// nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "model/activation_slots.h"
#include "model/core/collectives.h"
#include "model/gpt_block_pass.h"
#include "model/gpt_passes.h"
#include "model/gpt_shape.h"
#include "model/kernels/cpu/precision.h"
#include "model/moe/moe_layer.h"
#include "model/ops/cpu_ops.h"
#include "model/parameter_access.h"
#include "model/parameter_layout.h"
#include "model/recompute.h"

namespace strata {

struct GptOptions {
  cpu::ComputeDtype compute = cpu::ComputeDtype::fp32;
  Recompute recompute = Recompute::none;
  // Each slot keeps what its weight gradients need between backward_input and backward_weight
  // (the zero-bubble pipeline schedules); without it only the fused backward runs.
  bool split_backward = false;
  // How attention's K/V travel across a context-parallel group (parallel.cp_comm).
  ContextComm context_comm = ContextComm::ring;
  // Which GEMMs multiply in FP8 and how their operands scale (precision.fp8*; model/fp8/).
  Fp8Settings fp8{};
};

template <class T>
class Gpt : public GptPasses<Gpt<T>, CpuOps<T>, MoeLayer<T>> {
  using Passes = GptPasses<Gpt<T>, CpuOps<T>, MoeLayer<T>>;
  friend Passes;

 public:
  // The whole model in one process, one activation slot.
  Gpt(const GptShape& shape, int max_batch, const GptOptions& options = {});
  // `partition` of the model; `tp` is its tensor-parallel group (size partition.tp_size, not
  // owned; may be null when tp_size is 1). `slots`: micro-batches held at once. `ep`: the
  // expert-parallel group (size partition.ep_size, not owned; may be null when it is 1). `cp`: the
  // context-parallel group (partition.context: its size and this rank's place in it; not owned;
  // may be null when its size is 1); the model then computes this rank's rows of each sequence,
  // forward and backward taking B sequences of T_ = seq_len / cp rows (model/core/
  // context_chunks.h), and the loss is the mean over those rows.
  Gpt(const GptShape& shape, const ModelPartition& partition, Collectives* tp, int max_batch,
      int slots, const GptOptions& options = {}, Collectives* ep = nullptr,
      Collectives* cp = nullptr);
  ~Gpt();
  Gpt(Gpt&&) noexcept;
  Gpt& operator=(Gpt&&) noexcept;

  // shape(), partition(), layout(), segments(), activation_rows(B, T_), slots(), moe_loss(slot),
  // activation_bytes(), activation_bytes_per_layer() and take_moe_totals come from GptPasses
  // (model/gpt_passes.h): the MoE blocks' router losses of a slot's forward (the backward adds
  // their gradients to the cross-entropy's, which forward returns alone), and the bytes of the
  // activations kept in the slots used so far (each laid out for max_batch) and the recompute
  // workspace.
  const GptOptions& options() const { return options_; }

  // Whole-model forward into slot 0: tokens, targets (B, T_) with T_ <= seq_len. Returns the mean
  // cross-entropy over the B·T_ targets; targets may be null (logits only, returns 0).
  T forward(const T* params, const std::int32_t* tokens, const std::int32_t* targets, int B,
            int T_) {
    return forward(0, params, tokens, nullptr, targets, B, T_);
  }
  // Backward of slot 0: grads += d(loss_scale · mean loss)/d(params).
  void backward(const T* params, T* grads, T loss_scale) {
    backward(0, params, grads, nullptr, loss_scale);
  }

  // Forward of one micro-batch into `slot`. The first stage reads `tokens` (B, T_); later stages
  // read `input` (activation_rows(B, T_), C), the previous stage's output. The last stage reads
  // `targets` (null: logits only) and returns the mean loss; other stages return 0 and leave
  // their output in output(slot).
  T forward(int slot, const T* params, const std::int32_t* tokens, const T* input,
            const std::int32_t* targets, int B, int T_) {
    FlatParameters<T> flat(this->segments(), params, nullptr);
    return forward(slot, flat, tokens, input, targets, B, T_);
  }
  // The same, reaching the weights segment by segment through `parameters`.
  T forward(int slot, ParameterAccess<T>& parameters, const std::int32_t* tokens, const T* input,
            const std::int32_t* targets, int B, int T_);
  // Backward of the micro-batch in `slot`; grads += this stage's parameter gradients.
  // `output_grad` (activation_rows, C) is the gradient of this stage's output (ignored on the
  // last stage, where the loss starts the pass as loss_scale · mean). Afterwards, on a stage
  // other than the first, input_grad(slot) is the gradient to send to the previous stage.
  void backward(int slot, const T* params, T* grads, const T* output_grad, T loss_scale) {
    FlatParameters<T> flat(this->segments(), params, grads);
    backward(slot, flat, output_grad, loss_scale);
  }
  void backward(int slot, ParameterAccess<T>& parameters, const T* output_grad, T loss_scale);

  // The backward of `slot` split in two (GptOptions::split_backward; docs/ARCHITECTURE.md §5, the
  // split backward). backward_input computes the activation gradients, input_grad(slot) among
  // them, reading the weights only; it leaves in the slot what the weight gradients need.
  // backward_weight, any time later, adds the parameter gradients (acquiring only gradients) and
  // frees the slot for the next forward. The two add bitwise what backward adds.
  // backward_weight(slot, parameters) comes from GptPasses.
  void backward_input(int slot, ParameterAccess<T>& parameters, const T* output_grad, T loss_scale);

  const T* output(int slot) const;
  const T* input_grad(int slot) const;
  // Last stage, after a forward: per-position losses (B·T_) when it had targets; logits of this
  // rank's vocabulary rows (B·T_, padded_vocab / tp) when it had none, softmax probabilities
  // when it had targets (until backward overwrites them).
  const T* losses(int slot = 0) const;
  const T* logits(int slot = 0) const;

 private:
  using Passes::partition_;
  using Passes::sequence_parallel_;
  using Passes::shape_;
  using Passes::storage_;
  using typename Passes::Slot;
  static ModelPartition checked(const GptShape& shape, const ModelPartition& partition,
                                Collectives* tp, int max_batch, int slots, Collectives* ep,
                                Collectives* cp);
  // A stage before the last: the gradient of its output into the buffer the backward starts from.
  void take_output_grad(const Slot& s, const T* output_grad);

  std::unique_ptr<Collectives> single_rank_;  // used when no group is given
  Collectives* tp_;
  GptOptions options_;
  // Every kernel of the passes, each rounding its own outputs, and the tensor-parallel row
  // collectives over tp_ (model/ops/cpu_ops.h).
  CpuOps<T> ops_;
  std::unique_ptr<MoeLayer<T>> moe_;  // the MoE blocks' computation (model.moe), else null
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace strata
