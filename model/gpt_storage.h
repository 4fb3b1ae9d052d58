// The activation storage of a GPT model, written once for both backends (docs/ARCHITECTURE.md §5,
// "Activation storage"): GptStorage<Ops> reserves one block of the ops' memory (Ops::Reservation:
// host memory on the CPU, device memory on CUDA) at construction, lays out in it every slot and
// the shared buffers (model/gpt_arrays.h), and hands the passes (model/gpt_passes.h) their views:
// one block's activations in a slot or the recompute workspace, one layer of a weight stash, the
// shared buffers, the stage's output. No allocation happens during a step.
//
// Recompute (GptPasses's recompute mode) decides what a slot keeps: `none` every block array,
// `selective` all but attention's (qkv, its output, its statistics), `full` only each block's
// input; what a slot drops lives in a one-layer workspace that recomputation reruns into.
#pragma once

#include <cstddef>
#include <vector>

#include "model/gpt_arrays.h"
#include "model/gpt_block_pass.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"
#include "model/recompute.h"

namespace strata {

// What a model asks of its storage besides its shape and partition.
struct GptStorageOptions {
  int max_batch = 1;  // sequences per micro-batch, at most
  int slots = 1;      // micro-batches held at once
  Recompute recompute = Recompute::none;
  bool split_backward = false;   // every slot keeps a weight stash (the split backward)
  bool slot_input_grad = false;  // every slot of a later stage keeps its input gradient
};

template <class Ops>
class GptStorage {
 public:
  using Value = typename Ops::Value;
  using Stat = typename Ops::Stat;
  using Slot = GptSlot<Ops>;
  using Stash = GptWeightStash<Value, Stat>;
  using Activations = BlockActivations<Value, Stat, MoeActivationsOf<Ops>>;

  // `moe_bytes`: one MoE block's experts' activations in a slot, in this storage (GptDims).
  GptStorage(const GptShape& shape, const ModelPartition& partition, const GptStorageOptions& o,
             std::size_t moe_bytes)
      : d_(GptDims::of(shape, partition, o.max_batch, o.slots, moe_bytes)),
        options_(o),
        slots_(d_.slots),
        memory_(lay_out(nullptr)) {
    lay_out(memory_.get());
  }

  const GptDims& dims() const { return d_; }
  const GptStorageOptions& options() const { return options_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  Slot& slot(int i) { return slots_[static_cast<std::size_t>(i)]; }
  const Slot& slot(int i) const { return slots_[static_cast<std::size_t>(i)]; }

  // Each slot's MoE blocks' activations, from `moe` (the model's MoE layer, once it exists) over
  // the part of the slot its layout reserved for them.
  template <class Moe>
  void lay_out_moe(const Moe& moe) {
    for (Slot& s : slots_) {
      s.moe.assign(d_.L, {});
      char* next = s.moe_memory;
      for (std::size_t l = 0; l < d_.L; ++l) {
        if (!d_.moe[l]) continue;
        s.moe[l] = moe.activations(next, static_cast<int>(d_.N));
        if (next != nullptr) next += d_.moe_bytes;
      }
    }
  }

  // Block l's activations in slot `s`: where the slot keeps them, or the workspace for what
  // recomputation drops; `recomputing`: the block's output goes to the workspace too, the slot
  // keeping the forward's.
  Activations layer(Slot& s, int local_layer, bool recomputing) const {
    const std::size_t l = static_cast<std::size_t>(local_layer);
    const bool keep_rest = options_.recompute != Recompute::full;
    const bool keep_attention = options_.recompute == Recompute::none;
    const GptLayerArrays<Value, Stat>& rest = keep_rest ? s.kept : buffers_.work;
    const GptLayerArrays<Value, Stat>& attention = keep_attention ? s.kept : buffers_.work;
    const std::size_t r = keep_rest ? l : 0, a = keep_attention ? l : 0;
    const std::size_t m = keep_rest ? d_.dense_index[l] : 0;  // of the dense MLP's arrays
    const bool moe = d_.moe[l];
    const std::size_t rows = d_.Nr * d_.C, full = d_.N * d_.C;
    Activations x{};
    x.x = s.residual + l * rows;
    x.out = recomputing ? buffers_.recomputed_output : s.residual + (l + 1) * rows;
    x.ln1 = at(rest.ln1, r * rows);
    x.x2 = at(rest.x2, r * rows);
    x.ln2 = at(rest.ln2, r * rows);
    x.ln1_full = at(rest.ln1_full, r * full);
    x.ln2_full = at(rest.ln2_full, r * full);
    x.ln1_mean = at(rest.ln1_mean, r * d_.Nr);
    x.ln1_rstd = at(rest.ln1_rstd, r * d_.Nr);
    x.ln2_mean = at(rest.ln2_mean, r * d_.Nr);
    x.ln2_rstd = at(rest.ln2_rstd, r * d_.Nr);
    x.fch = moe ? nullptr : at(rest.fch, m * d_.N * d_.Fcl);
    x.fch_gelu = moe ? nullptr : at(rest.fch_gelu, m * d_.N * d_.Hl);
    x.qkv = at(attention.qkv, a * d_.N * d_.QKVl);
    x.atty = at(attention.atty, a * d_.N * d_.Cl);
    x.lse = at(attention.lse, a * d_.N * d_.NHl * Ops::kLsePerRow);
    x.moe = moe ? &s.moe[l] : nullptr;
    return x;
  }
  // Layer `at` of stash `w` (a slot's: every layer; the fused backward's: layer 0 only).
  StashLayer<Value, Stat> stash_layer(const Stash& w, int at) const {
    return w.layers[static_cast<std::size_t>(at)];
  }
  Stash& fused_stash() { return buffers_.stash; }
  GptBlockBuffers<Value> buffers() const {
    const GptBuffers<Ops>& b = buffers_;
    return {b.partial, b.reduced, b.dres, b.dln, b.datty, b.dact};
  }
  // The residual stream after the stage's last block.
  Value* stage_output(const Slot& s) const { return s.residual + d_.L * d_.Nr * d_.C; }

  // Bytes of saved activations in the slots that have held a micro-batch (their arrays without
  // the alignment's padding, the MoE blocks' host activations included), plus the recompute
  // workspace; and of those, what one block keeps over those slots (its input and what
  // recomputation does not drop).
  std::size_t activation_bytes() const {
    std::size_t bytes = workspace_bytes_;
    for (const Slot& s : slots_) {
      if (!s.used) continue;
      bytes += slot_bytes_;
      for (const auto& a : s.moe) bytes += moe_host_bytes(a);
    }
    return bytes;
  }
  std::size_t activation_bytes_per_layer() const {
    if (d_.L == 0) return 0;
    std::size_t used = 0;
    for (const Slot& s : slots_) used += s.used ? 1 : 0;
    return used * (kept_bytes_ / d_.L + d_.Nr * d_.C * sizeof(Value));
  }
  // One slot's activations and the workspace, as activation_bytes counts them.
  std::size_t slot_bytes() const { return slot_bytes_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  // The whole reservation: every slot (activations, ids, losses), the buffers, the padding.
  std::size_t reserved_bytes() const { return memory_.size(); }

 private:
  template <class U>
  static U* at(U* base, std::size_t offset) {
    return base == nullptr ? nullptr : base + offset;
  }

  // Lays out every slot and the shared buffers over `base` (null: only measures); returns the
  // bytes to reserve.
  std::size_t lay_out(char* base) {
    BufferCarver c(base);
    const bool keep_rest = options_.recompute != Recompute::full;
    const bool keep_attention = options_.recompute == Recompute::none;
    const GptDims& d = d_;
    for (Slot& s : slots_) {
      // What activation_bytes counts: everything a micro-batch keeps for its backward.
      const std::size_t begin = c.payload();
      s.residual = c.take<Value>((d.L + 1) * d.Nr * d.C);
      s.kept.carve(c, keep_rest ? d.L : 0, keep_attention ? d.L : 0, keep_rest ? d.mlp_layers() : 0,
                   d, Ops::kLsePerRow);
      kept_bytes_ = c.payload() - begin - (d.L + 1) * d.Nr * d.C * sizeof(Value);
      s.lnf = c.take<Value>(d.head ? d.Nr * d.C : 0);
      s.lnf_full = c.take<Value>(d.head && d.sp ? d.N * d.C : 0);
      s.lnf_mean = c.take<Stat>(d.head ? d.Nr : 0);
      s.lnf_rstd = c.take<Stat>(d.head ? d.Nr : 0);
      s.logits = c.take<Value>(d.head ? d.N * d.Vl : 0);
      s.losses = c.take<Stat>(d.head ? d.N : 0);
      s.input_grad = c.take<Value>(options_.slot_input_grad && !d.embedding ? d.Nr * d.C : 0);
      if (options_.split_backward) s.stash.carve(c, d, !keep_attention, !keep_rest);
      s.moe_memory = c.take<char>(d.moe_layers * d.moe_bytes);
      slot_bytes_ = c.payload() - begin;
      // The micro-batch's ids and the cross-entropy's row statistics.
      s.tokens = c.take<typename Ops::Ids>(d.N);
      s.targets = c.take<typename Ops::Ids>(d.N);
      s.ce_stats = c.take<Stat>(d.head ? Ops::kCrossEntropyStatsPerRow * d.N : 0);
    }
    GptBuffers<Ops>& b = buffers_;
    const std::size_t work_begin = c.payload();
    b.work.carve(c, keep_rest ? 0 : 1, keep_attention ? 0 : 1,
                 keep_rest || d.mlp_layers() == 0 ? 0 : 1, d, Ops::kLsePerRow);
    b.recomputed_output = c.take<Value>(keep_rest ? 0 : d.Nr * d.C);
    workspace_bytes_ = c.payload() - work_begin;
    b.partial = c.take<Value>(d.N * d.C);
    b.reduced = c.take<Value>(d.sp ? d.Nr * d.C : 0);
    b.dres = c.take<Value>(d.Nr * d.C);
    b.dln = c.take<Value>(d.sp ? d.N * d.C : 0);
    b.datty = c.take<Value>(d.N * d.Cl);
    b.dact = c.take<Value>(d.swiglu && d.mlp_layers() > 0 ? d.N * d.Hl : 0);
    // The fused backward reads dlnf before any block's input half writes layer 0, and dembed after
    // the last block's weight half has read it: both share layer 0's arrays.
    b.stash.layers.resize(1);
    carve_stash_layer(b.stash.layers[0], c, d, false, false, d.mlp_layers() > 0);
    b.stash.dlnf = d.head ? b.stash.layers[0].dln1 : nullptr;
    b.stash.dembed = d.embedding ? b.stash.layers[0].dz : nullptr;
    return c.used();
  }

  GptDims d_;
  GptStorageOptions options_;
  std::vector<Slot> slots_;
  GptBuffers<Ops> buffers_;
  std::size_t slot_bytes_ = 0, workspace_bytes_ = 0, kept_bytes_ = 0;
  typename Ops::Reservation memory_;  // last: laid out once the sizes above are known
};

}  // namespace strata
