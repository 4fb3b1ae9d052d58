// The arrays a GPT model keeps for its passes, described once for both backends
// (docs/ARCHITECTURE.md §5, "Activation storage"): a slot's (what one micro-batch keeps from its
// forward to its backward), the weight stash of the split backward, and the buffers every slot
// shares (the recompute workspace, the row-parallel partial sums, the backward's gradients). Each
// owner lays its arrays out with a BufferCarver, once to measure one reservation and once over
// it (GptStorage, model/gpt_storage.h, does both); the types are the ops object's (model/ops/ops.h:
// Value for activations and their gradients, Stat for statistics and losses, Ids for tokens), and
// what a backend keeps beyond the common arrays is the ops' own constant (kLsePerRow,
// kCrossEntropyStatsPerRow).
//
// Sizes (GptDims): N = B·T rows of max_batch sequences (T: the rank's rows of each, seq_len / cp
// under context parallelism), Nr the rows of the residual stream on this
// rank (N / tp with sequence parallelism), Cl = C / tp attention channels, QKVl = qkv_width / tp
// channels of its q, k and v, Hl = F / tp MLP channels (the activation's), Fcl its fc product's
// (Hl, or 2·Hl for SwiGLU's gate and up), NHl heads and Vl vocabulary rows of this rank. Every
// per-layer array is strided by the rows of max_batch sequences, whatever micro-batch a slot holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/activation_slots.h"
#include "model/gpt_block_pass.h"
#include "model/gpt_shape.h"
#include "model/moe/moe_mlp.h"
#include "model/parameter_layout.h"

namespace strata {

// Every array starts at a multiple of it: cudaMalloc's alignment, and the operand alignment
// cuBLASLt's plans are keyed by (so the split and fused backwards get the same GEMM algorithms).
inline constexpr std::size_t kStorageAlignment = 256;

// Carves typed arrays out of one reservation at kStorageAlignment. Run once without a base to
// measure the reservation (every array null), then again over it.
class BufferCarver {
 public:
  explicit BufferCarver(char* base = nullptr) : base_(base) {}
  template <class U>
  U* take(std::size_t count) {
    // Nothing for an empty array: a pointer there would alias the next one.
    U* p = base_ == nullptr || count == 0 ? nullptr : reinterpret_cast<U*>(base_ + used_);
    used_ += (count * sizeof(U) + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
    payload_ += count * sizeof(U);
    return p;
  }
  std::size_t used() const { return used_; }        // bytes, with the alignment's padding
  std::size_t payload() const { return payload_; }  // bytes of the arrays themselves

 private:
  char* base_;
  std::size_t used_ = 0;
  std::size_t payload_ = 0;
};

// The sizes above, of a partition's L layers; moe[l]: local layer l is an MoE block, whose
// experts' activations take moe_bytes of each slot's reservation (0 where they live elsewhere:
// the CPU's grow in host vectors); dense_index[l]: of a dense block, how many dense blocks precede
// it (the dense MLP's arrays hold those blocks only).
struct GptDims {
  std::size_t L = 0, C = 0, Cl = 0, QKVl = 0, Hl = 0, Fcl = 0, NHl = 0, Vl = 0, N = 0, Nr = 0;
  bool sp = false, embedding = false, head = false, swiglu = false;
  std::size_t slots = 0;
  std::vector<bool> moe;
  std::vector<std::size_t> dense_index;
  std::size_t moe_layers = 0, moe_bytes = 0;
  std::size_t mlp_layers() const { return L - moe_layers; }

  static GptDims of(const GptShape& shape, const ModelPartition& p, int max_batch, int slots,
                    std::size_t moe_bytes) {
    const std::size_t tp = static_cast<std::size_t>(p.tp_size);
    GptDims d;
    d.L = static_cast<std::size_t>(p.layers());
    d.C = static_cast<std::size_t>(shape.d_model);
    d.Cl = d.C / tp;
    d.QKVl = static_cast<std::size_t>(shape.qkv_width()) / tp;
    d.Hl = static_cast<std::size_t>(shape.ffn_width()) / tp;
    d.Fcl = static_cast<std::size_t>(shape.fc_width()) / tp;
    d.swiglu = shape.arch.mlp == MlpKind::swiglu;
    d.NHl = static_cast<std::size_t>(shape.n_head) / tp;
    d.Vl = static_cast<std::size_t>(shape.padded_vocab()) / tp;
    d.N = static_cast<std::size_t>(max_batch) *
          static_cast<std::size_t>(p.context.local_length(shape.seq_len));
    d.sp = p.sequence_parallel && tp > 1;
    d.Nr = d.sp ? d.N / tp : d.N;
    d.embedding = p.has_embedding;
    d.head = p.has_head;
    d.slots = static_cast<std::size_t>(slots);
    for (std::size_t l = 0; l < d.L; ++l) {
      d.moe.push_back(shape.moe.is_moe_block(p.layer_begin + static_cast<int>(l)));
      d.dense_index.push_back(l - d.moe_layers);
      d.moe_layers += d.moe[l] ? 1 : 0;
    }
    d.moe_bytes = moe_bytes;
    return d;
  }
};

// Per-layer arrays of blocks' activations (a count of layers of each: 0 where recomputation drops
// them; the dense MLP's only for the layers that have one, in their order).
template <class V, class S>
struct GptLayerArrays {
  V *ln1 = nullptr, *x2 = nullptr, *ln2 = nullptr, *fch = nullptr, *fch_gelu = nullptr;
  V *ln1_full = nullptr, *ln2_full = nullptr;
  S *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  V *qkv = nullptr, *atty = nullptr;
  S* lse = nullptr;  // (B, NHl, T) per layer, lse_per_row per (row, head): the ops' kLsePerRow

  // `rest_layers` layers of what `full` drops, `attention_layers` of what `selective` drops, of
  // which the dense MLP's for `mlp_layers` (the rest layers without experts).
  void carve(BufferCarver& c, std::size_t rest_layers, std::size_t attention_layers,
             std::size_t mlp_layers, const GptDims& d, std::size_t lse_per_row) {
    const std::size_t full_rows = d.sp ? rest_layers * d.N * d.C : 0;
    ln1 = c.take<V>(rest_layers * d.Nr * d.C);
    x2 = c.take<V>(rest_layers * d.Nr * d.C);
    ln2 = c.take<V>(rest_layers * d.Nr * d.C);
    ln1_full = c.take<V>(full_rows);
    ln2_full = c.take<V>(full_rows);
    ln1_mean = c.take<S>(rest_layers * d.Nr);
    ln1_rstd = c.take<S>(rest_layers * d.Nr);
    ln2_mean = c.take<S>(rest_layers * d.Nr);
    ln2_rstd = c.take<S>(rest_layers * d.Nr);
    fch = c.take<V>(mlp_layers * d.N * d.Fcl);
    fch_gelu = c.take<V>(mlp_layers * d.N * d.Hl);
    qkv = c.take<V>(attention_layers * d.N * d.QKVl);
    atty = c.take<V>(attention_layers * d.N * d.Cl);
    lse = c.take<S>(attention_layers * d.N * d.NHl * lse_per_row);
  }
};

// One layer of a weight stash (a StashLayer, model/gpt_block_pass.h), each array on its own so
// every layer's pointers have the storage's alignment. Copies of atty where `copy_attention`
// (selective and full recompute), of the rest where `copy_rest` (full); `mlp`: a dense block's
// layer (an MoE block's has no dfch nor fch_gelu).
template <class V, class S>
void carve_stash_layer(StashLayer<V, S>& w, BufferCarver& c, const GptDims& d, bool copy_attention,
                       bool copy_rest, bool mlp) {
  const std::size_t mlp_arrays = mlp ? 1 : 0;
  w.dz = c.take<V>(d.N * d.C);
  w.dy = c.take<V>(d.N * d.C);
  w.dfch = c.take<V>(mlp_arrays * d.N * d.Fcl);
  w.dqkv = c.take<V>(d.N * d.QKVl);
  w.dln1 = c.take<V>(d.Nr * d.C);
  w.dln2 = c.take<V>(d.Nr * d.C);
  w.atty = c.take<V>(copy_attention ? d.N * d.Cl : 0);
  const std::size_t rest = copy_rest ? 1 : 0;
  w.x2 = c.take<V>(rest * d.Nr * d.C);
  w.ln1_full = c.take<V>(rest * d.N * d.C);
  w.ln2_full = c.take<V>(rest * d.N * d.C);
  w.fch_gelu = c.take<V>(rest * mlp_arrays * d.N * d.Hl);
  for (S** stats : {&w.ln1_mean, &w.ln1_rstd, &w.ln2_mean, &w.ln2_rstd})
    *stats = c.take<S>(rest * d.Nr);
}

// A stage's weight stash: its layers', and the gradients of the final LayerNorm's output (last
// stage) and of the embedding's output (first stage, all rows). A slot's holds every layer, with
// the copies its recomputation needs (split backward); the fused backward's, in the buffers, one
// layer without copies.
template <class V, class S>
struct GptWeightStash {
  std::vector<StashLayer<V, S>> layers;
  V* dlnf = nullptr;    // (Nr, C)
  V* dembed = nullptr;  // (N, C)

  void carve(BufferCarver& c, const GptDims& d, bool copy_attention, bool copy_rest) {
    layers.resize(d.L);
    for (std::size_t l = 0; l < d.L; ++l)
      carve_stash_layer(layers[l], c, d, copy_attention, copy_rest, !d.moe[l]);
    dlnf = c.take<V>(d.head ? d.Nr * d.C : 0);
    dembed = c.take<V>(d.embedding ? d.N * d.C : 0);
  }
};

// What one micro-batch keeps from its forward to its backward, and where it stands.
template <class Ops>
struct GptSlot : SlotState {
  using V = typename Ops::Value;
  using S = typename Ops::Stat;
  typename Ops::Ids *tokens = nullptr, *targets = nullptr;  // (N), in the ops' memory
  V* residual = nullptr;      // (L+1, Nr, C): block inputs, then the stage output
  GptLayerArrays<V, S> kept;  // what recomputation keeps, all layers
  V* lnf = nullptr;           // (Nr, C), last stage
  V* lnf_full = nullptr;      // (N, C) gathered rows, last stage with sequence parallelism
  S *lnf_mean = nullptr, *lnf_rstd = nullptr;  // (Nr)
  V* logits = nullptr;                         // (N, Vl): logits, then (trained) their gradient
  S* losses = nullptr;                         // (N)
  // (kCrossEntropyStatsPerRow, N): what the ops' cross-entropy keeps for a later backward.
  S* ce_stats = nullptr;
  // (Nr, C) a later stage's input gradient, where the model keeps one per slot (null: the caller
  // reads it from the buffers' dres before the next backward).
  V* input_grad = nullptr;
  GptWeightStash<V, S> stash;  // split backward only: from the input half to the weight half
  // (moe_layers, moe_bytes): the MoE blocks' activations, in layer order; and per local layer an
  // MoE block's activations over its part (default, empty, for a dense block).
  char* moe_memory = nullptr;
  std::vector<MoeActivationsOf<Ops>> moe;
  typename Ops::Scalar loss_scale = 1;  // of the backward under way: the MoE losses' gradients too
  bool used = false;                    // has held a micro-batch (activation_bytes counts it)
};

// Shared by every slot: the recomputation workspace, the partial results of row-parallel layers
// before their sum, and the backward pass's gradients.
template <class Ops>
struct GptBuffers {
  using V = typename Ops::Value;
  using S = typename Ops::Stat;
  GptLayerArrays<V, S> work;       // one layer of what recomputation drops
  V* recomputed_output = nullptr;  // (Nr, C) full recompute's block output
  V* partial = nullptr;            // (N, C) row-parallel output before [sum]; embedding partial
  V* reduced = nullptr;            // (Nr, C) its sum with sequence parallelism
  V* dres = nullptr;               // (Nr, C) running gradient of the residual stream
  // (N, C) partial gradient of a LayerNorm output before its reduce-scatter (sequence
  // parallelism; without it the partial sums are added in place, in the stash).
  V* dln = nullptr;
  V* datty = nullptr;          // (N, Cl)
  V* dact = nullptr;           // (N, Hl) the MLP activation's gradient (SwiGLU only)
  GptWeightStash<V, S> stash;  // the fused backward's: one layer, no copies
};

}  // namespace strata
