// The GPT's passes, written once for both backends (docs/ARCHITECTURE.md §5, "One model for both
// backends"): GptPasses<Model, Ops, Moe> is the base of Gpt<T> (Model = Gpt<T>, Ops = CpuOps<T>)
// and of cuda::CudaGpt<T> (CudaOps<T>), and runs the embedding, the blocks (GptBlock,
// model/gpt_block_pass.h), the head and its cross-entropy forward, the backward in parts (head,
// each block, embedding; each an input half and a weight half, fused or split), and the MoE
// blocks' losses and routing figures. It holds what both models are made of (shape, partition,
// parameter layout, the block's tensor offsets, the MoE figures) and their activation storage
// (GptStorage, model/gpt_storage.h: the slots and the shared buffers, and the slots' bookkeeping),
// and reaches only two things through the model: its ops object `ops_` and its MoE layer `moe_`
// (null without experts). The model's own entry points (Gpt::forward, CudaGpt::forward, ...) take
// a slot (slot_for, backward_slot, weight_slot), put the micro-batch's ids or input activation in
// it, call these passes, and read the results their own way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/activation_slots.h"
#include "model/context_attention.h"
#include "model/core/error.h"
#include "model/gpt_block_pass.h"
#include "model/gpt_norm.h"
#include "model/gpt_shape.h"
#include "model/gpt_storage.h"
#include "model/parameter_access.h"
#include "model/parameter_layout.h"
#include "model/recompute.h"

namespace strata {

template <class Model, class Ops, class Moe>
class GptPasses {
 public:
  using Value = typename Ops::Value;
  using Grad = typename Ops::Grad;
  using Scalar = typename Ops::Scalar;
  using Parameters = ParameterAccess<Value, Grad>;
  using Block = GptBlock<Ops, Moe>;
  using Slot = GptSlot<Ops>;
  using Stash = GptWeightStash<Value, typename Ops::Stat>;

  const GptShape& shape() const { return shape_; }
  const ModelPartition& partition() const { return partition_; }
  const ParameterLayout& layout() const { return layout_; }
  // The layout's segments: what a ParameterAccess is asked for, by index.
  const std::vector<ParameterSegment>& segments() const { return segments_; }
  // Rows of each training sequence this rank computes: seq_len, or its share under context
  // parallelism (model/core/context_chunks.h).
  int sequence_rows() const { return partition_.context.local_length(shape_.seq_len); }
  // Rows of the residual stream on this rank: B·T_, or B·T_/tp with sequence parallelism.
  int activation_rows(int B, int T_) const {
    return sequence_parallel_ ? B * T_ / partition_.tp_size : B * T_;
  }
  // The MoE blocks' routing figures of the backward passes since the last call (MoeTotals over the
  // model's n_layer blocks: this model's at their layer index), added into `totals`; then
  // counting starts afresh. Evaluation forwards (no backward) are not counted.
  void take_moe_totals(std::vector<double>& totals) {
    if (moe_totals_.empty()) return;
    totals.resize(moe_totals_.size(), 0.0);
    for (std::size_t i = 0; i < totals.size(); ++i) totals[i] += moe_totals_[i];
    std::fill(moe_totals_.begin(), moe_totals_.end(), 0.0);
  }
  int slots() const { return storage_.slots(); }
  // The FP8 GEMMs' scaling state (precision.fp8; model/fp8/fp8_state.h), null without them.
  Fp8State* fp8_state() { return fp8_.get(); }

  // The backward of the micro-batch in `slot`: the parameter gradients of loss_scale · its mean
  // loss added to the gradients `parameters` hands out. A stage before the last starts from the
  // gradient of its output, which the caller has put in the buffers' dres (Gpt::backward copies
  // it there; CudaGpt::stage_output_grad is it); afterwards a stage after the first finds its
  // input gradient in dres (and, where the model keeps one, in the slot's input_grad).
  void backward(int slot, Parameters& parameters, Scalar loss_scale) {
    backward_pass(backward_slot(slot), parameters, loss_scale, false);
  }
  // The same split in two (the model built with split_backward; docs/ARCHITECTURE.md §5, the split
  // backward): backward_input computes the activation gradients, acquiring weights only, and
  // leaves in the slot what the weight gradients need; backward_weight, any time later, adds the
  // parameter gradients, acquiring gradients only, and frees the slot for the next forward.
  // Together they add bitwise what backward adds.
  void backward_input(int slot, Parameters& parameters, Scalar loss_scale) {
    STRATA_CHECK(storage_.options().split_backward,
                 "backward_input needs a model built with split_backward");
    backward_input_pass(backward_slot(slot), parameters, loss_scale);
  }
  void backward_weight(int slot, Parameters& parameters) {
    backward_weight_pass(weight_slot(slot), parameters);
  }
  // The MoE blocks' router losses of the slot's last forward (model/moe/moe_mlp.h: aux_loss · aux
  // + z_loss · z summed over this model's MoE blocks; 0 without experts, or for an unused slot):
  // the backward adds their gradients to the cross-entropy's, which the forward reports alone.
  Scalar moe_loss(int slot = 0) const {
    STRATA_CHECK(slot >= 0 && slot < slots(), "no slot ", slot);
    Scalar sum = 0;
    if (!model().moe_) return sum;
    for (const auto& a : storage_.slot(slot).moe)
      if (a.tokens > 0) sum += model().moe_->loss(a);  // dense blocks have none
    return sum;
  }
  // Bytes of saved activations in the slots used so far (each laid out for max_batch), plus the
  // recompute workspace (GptStorage::activation_bytes); and of those, the bytes one block keeps
  // over those slots: its input (the residual stream) and what recomputation does not drop.
  // With context parallelism, the attention's working memory too (model/context_attention.h).
  std::size_t activation_bytes() const {
    return storage_.activation_bytes() + (context_ ? context_->memory_bytes() : 0);
  }
  std::size_t activation_bytes_per_layer() const { return storage_.activation_bytes_per_layer(); }

 protected:
  // `partition` is checked by the model before (its storage is laid out here).
  GptPasses(const GptShape& shape, const ModelPartition& partition,
            const GptStorageOptions& storage)
      : shape_(shape),
        partition_(partition),
        layout_(ParameterLayout::for_partition(shape, partition)),
        segments_(layout_.segments()),
        segment_(segment_index(segments_)),
        sequence_parallel_(partition.sequence_parallel && partition.tp_size > 1),
        recompute_(storage.recompute),
        storage_(shape, partition, storage, moe_bytes(shape, partition, storage.max_batch)) {
    // wte and the untied lm_head split the vocabulary alike.
    for (const char* table : {"wte", "lm_head.weight"})
      if (layout_.has(table)) {
        const TensorView& t = layout_.at(table);
        vocab_ = {static_cast<int>(t.slice.mid_begin), static_cast<int>(t.slice.mid_count),
                  shape.vocab_size};
      }
    if (shape.moe.enabled())
      moe_totals_.assign(shape.n_layer * MoeTotals::stride(shape.moe.experts), 0.0);
  }
  // Attention across the context-parallel group `cp` (the partition's context; its size > 1),
  // over the model's ops: once the model has them.
  void attend_across(typename Ops::Group& cp, ContextComm comm) {
    STRATA_CHECK(cp.size() == partition_.context.cp && cp.rank() == partition_.context.rank,
                 "a context-parallel partition needs its group");
    const GptBlockDims d(shape_, partition_);
    context_ = std::make_unique<ContextAttention<Ops>>(
        model().ops_, cp, comm, storage_.options().max_batch, sequence_rows(),
        typename ContextAttention<Ops>::Heads{d.NHl, d.KVl, d.head_size});
  }
  // FP8 GEMMs (precision.fp8) in the blocks, as `settings` says for each GEMM's logical shape (an
  // MoE block's experts stay in the compute dtype).
  void multiply_in_fp8(const Fp8Settings& settings) {
    if (!settings.enabled()) return;
    std::vector<std::array<bool, kFp8Layers>> runs;
    for (int l = 0; l < partition_.layers(); ++l)
      runs.push_back(fp8_gemms_of_block(settings, shape_, partition_.layer_begin + l));
    fp8_ = std::make_unique<Fp8State>(settings, partition_.layer_begin, std::move(runs));
  }
  // Where each block's tensors are: once the model has checked its partition.
  void find_block_offsets() {
    for (int l = 0; l < partition_.layers(); ++l)
      block_offsets_.push_back(BlockOffsets::of(layout_, segments_[block_segment(l)],
                                                partition_.layer_begin + l, is_moe(l)));
  }

  // The slot a forward of B sequences of T_ tokens goes into: checked and free; from now on it
  // counts as used.
  Slot& slot_for(int slot, int B, int T_) {
    if (slot >= 0 && slot < slots()) check_slot_free(storage_.slot(slot), slot);
    check_slot_batch(slot_limits(), slot, B, T_);
    Slot& s = storage_.slot(slot);
    s.batch = B;
    s.time = T_;
    s.used = true;
    return s;
  }
  // The slot a backward (or its input half) runs on, and the one its weight half runs on.
  Slot& backward_slot(int slot) {
    check_slot_backward(slot_limits(), state_of(slot), slot, partition_.has_head);
    return storage_.slot(slot);
  }
  Slot& weight_slot(int slot) {
    check_slot_weight_backward(slot_limits(), state_of(slot), slot);
    return storage_.slot(slot);
  }
  SlotState state_of(int slot) const {
    if (slot < 0 || slot >= slots()) return {};
    return storage_.slot(slot);
  }
  SlotLimits slot_limits() const {
    return {slots(), storage_.options().max_batch, sequence_rows(),
            sequence_parallel_ ? partition_.tp_size : 1};
  }
  // One MoE block's experts' activations in a slot of the storage (0: they keep their own).
  static std::size_t moe_bytes(const GptShape& shape, const ModelPartition& p, int max_batch) {
    return shape.moe.enabled() ? Moe::activation_bytes(shape.expert_shape(), p.tp_size, shape.moe,
                                                       max_batch * shape.seq_len, p.ep_size)
                               : 0;
  }

  int block_segment(int local_layer) const { return segment_.block(local_layer); }
  bool is_moe(int local_layer) const {
    return shape_.moe.is_moe_block(partition_.layer_begin + local_layer);
  }
  // A named tensor in its segment's weights (or gradients) starting at `base`.
  template <class P>
  P* in_segment(P* base, int segment, const char* name) const {
    return base +
           (layout_.at(name).offset - segments_[static_cast<std::size_t>(segment)].range.begin);
  }

  // The forward of the micro-batch (B, T_) the model has put in `s` (its ids, or on a later stage
  // its input activation in the residual stream): the embedding (first stage), the blocks, the
  // head (last stage) and, with targets, the per-position losses.
  void forward_pass(Slot& s, Parameters& parameters) {
    if (partition_.has_embedding) embed(s, parameters);
    blocks_forward(s, parameters);
    s.forwarded = true;
    if (!partition_.has_head) return;
    head_forward(s, parameters);
    if (s.has_targets)
      model().ops_.cross_entropy_forward(s.losses, s.ce_stats, s.logits, s.targets, vocab_,
                                         s.batch * s.time);
  }

  // Training through a whole pipeline in one pass: forward, the loss and its logits' gradient
  // in one op, and the fused backward.
  void forward_backward_pass(Slot& s, Parameters& parameters, Scalar loss_scale) {
    embed(s, parameters);
    blocks_forward(s, parameters);
    head_forward(s, parameters);
    model().ops_.cross_entropy_forward_backward(s.losses, s.ce_stats, s.logits, s.targets,
                                                loss_scale, vocab_, s.batch * s.time);
    s.forwarded = true;
    s.has_targets = true;
    backward_pass(s, parameters, loss_scale, true);
  }

  // The backward pass in parts: the head's, each block's (last to first) and the embedding's.
  // Each part's input half computes the activation gradients and leaves in a stash what its
  // weight half reads. Fused, each weight half follows its input half at once through the
  // one-layer stash; split, every input half runs first (backward_input_pass) and the weight
  // halves later (backward_weight_pass) from the slot's stash. Either way every parameter gradient
  // is added by the same op calls on the same values, so the two agree bitwise. A stage before
  // the last starts from the gradient of its output, which the model has put in buffers().dres.
  // `fused`: the logits already hold their gradient (forward_backward_pass).
  void backward_pass(Slot& s, Parameters& parameters, Scalar loss_scale, bool fused) {
    auto& w = storage_.fused_stash();
    s.loss_scale = loss_scale;
    if (partition_.has_head) head_backward_input(s, parameters, loss_scale, fused, w);
    // The tied wte takes gradients from the head and from the embedding: one acquisition spans
    // both.
    Grad* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
    if (partition_.has_head) head_weight_half(s, parameters, wte_grads, w);
    for (int l = partition_.layers() - 1; l >= 0; --l) {
      block_backward_input(s, parameters, l, w, 0);
      block_backward_weight(s, parameters, l, w, 0);
    }
    backward_finish(s, w);
    if (partition_.has_embedding) {
      embed_backward_weight(s, parameters, wte_grads, w);
      parameters.release_gradients(segment_.wte);
    }
    s.forwarded = false;  // the logits hold their gradient now
  }

  // The input halves (docs/ARCHITECTURE.md §5, the split backward), into the slot's stash.
  void backward_input_pass(Slot& s, Parameters& parameters, Scalar loss_scale) {
    s.loss_scale = loss_scale;
    if (partition_.has_head) head_backward_input(s, parameters, loss_scale, false, s.stash);
    for (int l = partition_.layers() - 1; l >= 0; --l)
      block_backward_input(s, parameters, l, s.stash, l);
    backward_finish(s, s.stash);
    s.forwarded = false;
    s.weight_pending = true;
  }

  // The weight halves, from the slot's stash.
  void backward_weight_pass(Slot& s, Parameters& parameters) {
    Grad* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
    if (partition_.has_head) head_weight_half(s, parameters, wte_grads, s.stash);
    for (int l = partition_.layers() - 1; l >= 0; --l)
      block_backward_weight(s, parameters, l, s.stash, l);
    if (partition_.has_embedding) {
      embed_backward_weight(s, parameters, wte_grads, s.stash);
      parameters.release_gradients(segment_.wte);
    }
    s.weight_pending = false;
  }

  GptShape shape_;
  ModelPartition partition_;
  ParameterLayout layout_;
  std::vector<ParameterSegment> segments_;
  SegmentIndex segment_;    // of segments_
  bool sequence_parallel_;  // rows split over the tensor-parallel group (tp > 1 only)
  Recompute recompute_;
  GptStorage<Ops> storage_;  // the slots and the shared buffers
  VocabShard vocab_;         // this rank's rows of wte and the head (tied, or lm_head), if any
  std::vector<BlockOffsets> block_offsets_;         // per local layer: its tensors in its segment
  std::vector<double> moe_totals_;                  // MoeTotals over n_layer blocks, since taken
  std::unique_ptr<ContextAttention<Ops>> context_;  // with context parallelism, else null
  std::unique_ptr<Fp8State> fp8_;                   // with FP8 GEMMs, else null

 private:
  Model& model() { return static_cast<Model&>(*this); }
  // Local block l's passes over the model's ops, MoE layer, buffers and FP8 state.
  Block block(int l) {
    return Block(model().ops_, model().moe_.get(), context_.get(), GptBlockDims(shape_, partition_),
                 recompute_, storage_.buffers(), fp8_.get(), l);
  }
  const Model& model() const { return static_cast<const Model&>(*this); }
  const BlockOffsets& offsets(int l) const { return block_offsets_[static_cast<std::size_t>(l)]; }
  GptNorm<Ops> norm() { return {model().ops_, shape_.arch.norm, shape_.arch.norm_eps}; }
  // The head's matrix: the tied wte, or lm_head.
  const char* head_name() const { return segment_.lm_head >= 0 ? "lm_head.weight" : "wte"; }
  // The final norm's bias, where the model has one (else null).
  template <class P>
  P* lnf_bias(P* lnf) const {
    return layout_.has("lnf.bias") ? in_segment(lnf, segment_.lnf, "lnf.bias") : nullptr;
  }

  // Each rank looks up the tokens of its vocabulary rows (zeros elsewhere); the sum over the
  // group is the embedding. Without sequence parallelism straight into the residual stream.
  void embed(Slot& s, Parameters& parameters) {
    Ops& ops = model().ops_;
    const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
    Value* residual = s.residual;
    Value* lookup = sequence_parallel_ ? storage_.buffers().partial : residual;
    const Value* wte = parameters.acquire_weights(segment_.wte, WeightUse::forward);
    ops.embedding_forward(lookup, s.tokens, in_segment(wte, segment_.wte, "wte"), vocab_, N,
                          C);  // (N, C)
    parameters.release_weights(segment_.wte);
    ops.sum_rows(lookup, residual, N, C);  // (Nl, C), in the residual stream either way
    if (segment_.wpe < 0) return;          // rotary positions: turned in each block's attention
    const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nl : 0;
    const Value* wpe = parameters.acquire_weights(segment_.wpe, WeightUse::forward);
    for_each_position_run(row_begin, Nl, s.time, [&](long at, int rows, long position, int T_) {
      ops.position_embedding_forward(residual + at * C, in_segment(wpe, segment_.wpe, "wpe"),
                                     position, rows, T_, C);
    });
    parameters.release_weights(segment_.wpe);
  }

  // The position embedding's calls for rows [row_begin, row_begin + rows) of the micro-batch's
  // sequences of T_ rows: body(at, rows, position, T) adds positions (position + i) mod T to rows
  // at + i, as the ops' position_embedding_forward does. Whole sequences: one call, row r of the
  // range at position (row_begin + r) mod T_. A context-parallel member's: one call per run of
  // consecutive positions (model/core/context_chunks.h), none of them wrapping.
  template <class Body>
  void for_each_position_run(long row_begin, int rows, int T_, Body&& body) const {
    const ContextChunks& context = partition_.context;
    if (!context.split()) {
      body(0, rows, row_begin, T_);
      return;
    }
    context.for_each_run(row_begin, rows, T_, [&](long at, long count, long position) {
      body(at, static_cast<int>(count), position, shape_.seq_len);
    });
  }

  // The blocks of a forward pass, each segment's weights acquired around its ops.
  void blocks_forward(Slot& s, Parameters& parameters) {
    for (int l = 0; l < partition_.layers(); ++l) {
      const Value* weights = parameters.acquire_weights(block_segment(l), WeightUse::forward);
      block(l).forward(storage_.layer(s, l, false), s.batch, s.time,
                       typename Block::Weights(weights, offsets(l)));
      parameters.release_weights(block_segment(l));
    }
  }

  // The final norm and the logits of this rank's vocabulary rows (N, Vl), the head tied to wte
  // or lm_head: the cross-entropy reads the rounded logits (as fused classifier kernels do).
  void head_forward(Slot& s, Parameters& parameters) {
    Ops& ops = model().ops_;
    const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
    const Value* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::forward);
    norm().forward(s.lnf, s.lnf_mean, s.lnf_rstd, storage_.stage_output(s),
                   in_segment(lnf, segment_.lnf, "lnf.weight"), lnf_bias(lnf), Nl, C);
    parameters.release_weights(segment_.lnf);
    const Value* lnf_full = ops.gather_rows(s.lnf, s.lnf_full, N, C);
    const int head = segment_.head();
    const Value* matrix = parameters.acquire_weights(head, WeightUse::forward);
    ops.matmul_forward(s.logits, nullptr, lnf_full, in_segment(matrix, head, head_name()), nullptr,
                       N, C, vocab_.rows, Epilogue::bias, Fp8Gemm{});
    parameters.release_weights(head);
  }

  // The head's input half: the logits' gradient (in place of the logits, where the weight half
  // reads it), then the final LayerNorm's output gradient (into w.dlnf) and dres, the gradient of
  // the stage output.
  void head_backward_input(Slot& s, Parameters& parameters, Scalar loss_scale, bool fused,
                           Stash& w) {
    Ops& ops = model().ops_;
    const GptBlockBuffers<Value> b = storage_.buffers();
    const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
    Value* logits = s.logits;
    if (!fused)
      ops.cross_entropy_backward(s.losses, s.ce_stats, logits, s.targets, loss_scale, vocab_, N);
    // Partial sums over the vocabulary shards, summed in place when the rows are not split.
    Value* dlnf = w.dlnf;
    Value* partial = sequence_parallel_ ? b.dln : dlnf;
    const int head = segment_.head();
    const Value* matrix = parameters.acquire_weights(head, WeightUse::backward);
    ops.matmul_backward_input(partial, logits, in_segment(matrix, head, head_name()), nullptr, N, C,
                              vocab_.rows, Fp8Gemm{});
    parameters.release_weights(head);
    ops.sum_rows(partial, dlnf, N, C);  // (Nl, C) into the stash
    ops.zero(b.dres, static_cast<std::size_t>(Nl) * C);
    const Value* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::backward);
    norm().backward_input(b.dres, dlnf, storage_.stage_output(s),
                          in_segment(lnf, segment_.lnf, "lnf.weight"), s.lnf_mean, s.lnf_rstd, Nl,
                          C);
    parameters.release_weights(segment_.lnf);
  }

  // The block's input half (GptBlock::backward_input) into stash layer `at` of `w`; one
  // acquisition of the weights serves the recomputation and the backward pass.
  void block_backward_input(Slot& s, Parameters& parameters, int l, Stash& w, int at) {
    const int segment = block_segment(l);
    const typename Block::Weights p(parameters.acquire_weights(segment, WeightUse::backward),
                                    offsets(l));
    block(l).backward_input(storage_.layer(s, l, true), storage_.stash_layer(w, at), p, s.batch,
                            s.time, s.loss_scale, moe_totals_.data(), partition_.layer_begin + l);
    parameters.release_weights(segment);
  }

  // The block's weight half: every parameter gradient, added (+=) by the ops the fused backward
  // used (the halves of matmul's and LayerNorm's backward), from the activations where the slot
  // keeps them, their copies in the stash, or the workspace (the fused backward's recomputation).
  void block_backward_weight(Slot& s, Parameters& parameters, int l, Stash& w, int at) {
    const int segment = block_segment(l);
    const typename Block::Stash stash = storage_.stash_layer(w, at);
    const typename Block::Grads g(parameters.acquire_gradients(segment), offsets(l));
    block(l).backward_weight(
        Block::weight_inputs(storage_.layer(s, l, true), stash, sequence_parallel_), stash, g,
        s.batch * s.time);
    parameters.release_gradients(segment);
  }

  // After the blocks: the embedding's weight half reads all rows of its output's gradient; a
  // later stage's input gradient is dres, kept in the slot where the model keeps one.
  void backward_finish(Slot& s, Stash& w) {
    const GptBlockBuffers<Value> b = storage_.buffers();
    const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
    if (partition_.has_embedding)
      model().ops_.gather_rows_into(b.dres, w.dembed, N, C);
    else if (Value* input_grad = s.input_grad)
      model().ops_.copy(input_grad, static_cast<const Value*>(b.dres),
                        static_cast<std::size_t>(Nl) * C);
  }

  // Weight halves; wte_grads: the gradients of the wte segment (tied: both the head and the
  // embedding add to it), held from before the head's to after the embedding's. The head's own
  // matrix, untied, is acquired and released around its weight half.
  void head_weight_half(Slot& s, Parameters& parameters, Grad* wte_grads, Stash& w) {
    if (segment_.lm_head < 0) {
      head_backward_weight(s, parameters, wte_grads, w);
      if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
      return;
    }
    head_backward_weight(s, parameters, parameters.acquire_gradients(segment_.lm_head), w);
    parameters.release_gradients(segment_.lm_head);
  }
  // head_grads: the gradients of the head matrix's segment.
  void head_backward_weight(Slot& s, Parameters& parameters, Grad* head_grads, Stash& w) {
    Ops& ops = model().ops_;
    const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
    const Value* lnf_full = sequence_parallel_ ? s.lnf_full : s.lnf;
    ops.matmul_backward_weight(in_segment(head_grads, segment_.head(), head_name()), nullptr,
                               s.logits, lnf_full, N, C, vocab_.rows, Fp8Gemm{});
    Grad* lnf = parameters.acquire_gradients(segment_.lnf);
    norm().backward_weight(in_segment(lnf, segment_.lnf, "lnf.weight"), lnf_bias(lnf), w.dlnf,
                           storage_.stage_output(s), s.lnf_mean, s.lnf_rstd, Nl, C);
    parameters.release_gradients(segment_.lnf);
  }

  void embed_backward_weight(Slot& s, Parameters& parameters, Grad* wte_grads, Stash& w) {
    Ops& ops = model().ops_;
    const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
    const Value* dembed = w.dembed;
    const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nl : 0;
    if (segment_.wpe >= 0) {
      Grad* wpe = parameters.acquire_gradients(segment_.wpe);
      for_each_position_run(row_begin, Nl, s.time, [&](long at, int rows, long position, int T_) {
        ops.position_embedding_backward(in_segment(wpe, segment_.wpe, "wpe"),
                                        dembed + (row_begin + at) * C, position, rows, T_, C);
      });
      parameters.release_gradients(segment_.wpe);
    }
    ops.embedding_backward(in_segment(wte_grads, segment_.wte, "wte"), dembed, s.tokens, vocab_, N,
                           C);
  }
};

}  // namespace strata
