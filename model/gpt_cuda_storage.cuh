// The storage of CudaGpt (model/gpt_cuda.h), shared by the files that implement it: the carver
// that lays every array out in one reservation, the sizes derived from the shape, one block's
// activation pointers, a slot (what one micro-batch keeps from its forward to its backward) and
// the buffers every slot shares. gpt_cuda.cu lays the storage out and answers the accessors;
// model/gpt_passes.h runs the passes (its in_segment gives the parameter views by tensor name).
// Internal to model/gpt_cuda*.cu.
// Status: ran on an NVIDIA H200 (2026-11-26) as part of gpt_cuda.cu, before this split (a move).
// The weight stash (the split backward) has not run on a GPU yet; the MoE blocks' activations
// (Slot::moe): compiled, never run on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_cuda.h"
#include "model/kernels/cuda/arena.h"

namespace strata::cuda {

// Carves typed arrays out of one reservation at the arena's alignment. Run once without a base
// to measure the reservation, then again over it.
class BufferCarver {
 public:
  explicit BufferCarver(char* base = nullptr) : base_(base) {}
  template <class U>
  U* take(std::size_t count) {
    constexpr std::size_t align = DeviceArena::kDefaultAlignment;
    // Nothing for an empty array: a pointer there would alias the next one.
    U* p = base_ == nullptr || count == 0 ? nullptr : reinterpret_cast<U*>(base_ + used_);
    used_ += (count * sizeof(U) + align - 1) / align * align;
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

// Sizes derived from the shape and the partition: N = B·T rows (max_batch sequences), Nr the
// rows of the residual stream on this rank (N / tp with sequence parallelism), Cl = C / tp
// attention channels, Hl = 4C / tp MLP channels, NHl heads and Vl vocabulary rows of this rank;
// of the stage's L layers, moe_layers are MoE blocks (moe[l]: local layer l is one), each keeping
// moe_bytes of experts' activations per slot (CudaMoeLayer::activation_bytes for N tokens, a
// multiple of the arena's alignment; 0 without experts) and no dense MLP arrays.
template <class T>
struct CudaGpt<T>::Dims {
  std::size_t L, C, Cl, Hl, NHl, Vl, N, Nr;
  bool sp, embedding, head;
  std::size_t slots;
  std::vector<bool> moe;
  std::size_t moe_layers, moe_bytes;
  std::size_t mlp_layers() const { return L - moe_layers; }
};

// Per-layer arrays (a count of layers of each: 0 where recomputation drops them; the dense MLP's
// only for the layers that have one, in their order).
template <class T>
struct GptLayerArrays {
  T *ln1 = nullptr, *x2 = nullptr, *ln2 = nullptr, *fch = nullptr, *fch_gelu = nullptr;
  T *ln1_full = nullptr, *ln2_full = nullptr;
  float *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  T *qkv = nullptr, *atty = nullptr;
  float* lse = nullptr;

  // `rest_layers` layers of what `full` drops, `attention_layers` of what `selective` drops, of
  // which the dense MLP's for `mlp_layers` (the rest layers without experts).
  template <class D>
  void carve(BufferCarver& c, std::size_t rest_layers, std::size_t attention_layers,
             std::size_t mlp_layers, const D& d) {
    const std::size_t full_rows = d.sp ? rest_layers * d.N * d.C : 0;
    ln1 = c.take<T>(rest_layers * d.Nr * d.C);
    x2 = c.take<T>(rest_layers * d.Nr * d.C);
    ln2 = c.take<T>(rest_layers * d.Nr * d.C);
    ln1_full = c.take<T>(full_rows);
    ln2_full = c.take<T>(full_rows);
    ln1_mean = c.take<float>(rest_layers * d.Nr);
    ln1_rstd = c.take<float>(rest_layers * d.Nr);
    ln2_mean = c.take<float>(rest_layers * d.Nr);
    ln2_rstd = c.take<float>(rest_layers * d.Nr);
    fch = c.take<T>(mlp_layers * d.N * d.Hl);
    fch_gelu = c.take<T>(mlp_layers * d.N * d.Hl);
    qkv = c.take<T>(attention_layers * d.N * 3 * d.Cl);
    atty = c.take<T>(attention_layers * d.N * d.Cl);
    lse = c.take<float>(attention_layers * d.N * d.NHl);  // (B, NHl, T)
  }
};

// Carves one layer of a weight stash (GptStashLayer, model/gpt_block_pass.h's StashLayer): each
// array on its own, so every layer's pointers have the arena's alignment (cuBLASLt plans are
// keyed by alignment: the split and fused backwards get the same GEMM algorithms). Copies of
// atty where `copy_attention` (selective and full recompute), of the rest where `copy_rest`
// (full); `mlp`: the layer is a dense block's (an MoE block's has no dfch nor fch_gelu). Row
// counts as in Dims.
template <class T, class D>
void carve_stash_layer(GptStashLayer<T>& w, BufferCarver& c, const D& d, bool copy_attention,
                       bool copy_rest, bool mlp) {
  const std::size_t mlp_arrays = mlp ? 1 : 0;
  w.dz = c.take<T>(d.N * d.C);
  w.dy = c.take<T>(d.N * d.C);
  w.dfch = c.take<T>(mlp_arrays * d.N * d.Hl);
  w.dqkv = c.take<T>(d.N * 3 * d.Cl);
  w.dln1 = c.take<T>(d.Nr * d.C);
  w.dln2 = c.take<T>(d.Nr * d.C);
  w.atty = c.take<T>(copy_attention ? d.N * d.Cl : 0);
  const std::size_t rest = copy_rest ? 1 : 0;
  w.x2 = c.take<T>(rest * d.Nr * d.C);
  w.ln1_full = c.take<T>(rest * d.N * d.C);
  w.ln2_full = c.take<T>(rest * d.N * d.C);
  w.fch_gelu = c.take<T>(rest * mlp_arrays * d.N * d.Hl);
  for (float** stats : {&w.ln1_mean, &w.ln1_rstd, &w.ln2_mean, &w.ln2_rstd})
    *stats = c.take<float>(rest * d.Nr);
}

// A stage's weight stash: its layers', and the gradients of the final LayerNorm's output (last
// stage) and of the embedding's output (first stage, all rows). A slot's holds every layer, with
// the copies its recomputation needs (split backward); the fused backward's, in Buffers, one
// layer without copies.
template <class T>
struct GptWeightStash {
  std::vector<GptStashLayer<T>> layers;
  T* dlnf = nullptr;    // (Nr, C)
  T* dembed = nullptr;  // (N, C)

  template <class D>
  void carve(BufferCarver& c, const D& d, bool copy_attention, bool copy_rest) {
    layers.resize(d.L);
    for (std::size_t l = 0; l < d.L; ++l)
      carve_stash_layer(layers[l], c, d, copy_attention, copy_rest, !d.moe[l]);
    dlnf = c.take<T>(d.head ? d.Nr * d.C : 0);
    dembed = c.take<T>(d.embedding ? d.N * d.C : 0);
  }
};

// What one micro-batch keeps from its forward to its backward, and where it stands.
template <class T>
struct CudaGpt<T>::Slot : SlotState {
  std::int32_t *tokens = nullptr, *targets = nullptr;  // (N) device copies
  T* residual = nullptr;   // (L+1, Nr, C): block inputs, then the stage output
  GptLayerArrays<T> kept;  // what recomputation keeps, all layers
  T* lnf = nullptr;        // (Nr, C), last stage
  T* lnf_full = nullptr;   // (N, C) gathered rows, last stage with sequence parallelism
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;  // (Nr)
  T* logits = nullptr;                             // (N, Vl): logits, then (trained) their gradient
  float* losses = nullptr;                         // (N)
  T* input_grad = nullptr;  // none: a later stage's input gradient is read from dres
  // (3, N) cross-entropy row statistics: max, Σ exp, target logit (kept for a later backward).
  float* ce_stats = nullptr;
  GptWeightStash<T> stash;  // split backward only: from the input half to the weight half
  // (moe_layers, moe_bytes): the MoE blocks' activations, in layer order; and per local layer an
  // MoE block's CudaMoeActivations over its part (default, empty, for a dense block).
  char* moe_memory = nullptr;
  std::vector<CudaMoeActivations<T>> moe;
  float loss_scale = 1;  // of the backward under way: the router losses' gradients take it too
};

// Shared by every slot: the recomputation workspace, the partial results of row-parallel layers
// before their sum, and the backward pass's gradients.
template <class T>
struct CudaGpt<T>::Buffers {
  GptLayerArrays<T> work;          // one layer of what recomputation drops
  T* recomputed_output = nullptr;  // (Nr, C) full recompute's block output
  T* partial = nullptr;            // (N, C) row-parallel output before [sum]; embedding partial
  T* reduced = nullptr;            // (Nr, C) its sum with sequence parallelism
  T* dres = nullptr;               // (Nr, C) running gradient of the residual stream
  // (N, C) partial gradient of a LayerNorm output before its reduce-scatter (sequence
  // parallelism; without it the partial sums are added in place, in the stash).
  T* dln = nullptr;
  T* datty = nullptr;       // (N, Cl)
  GptWeightStash<T> stash;  // the fused backward's: one layer, no copies
};

}  // namespace strata::cuda
