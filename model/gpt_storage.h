// Internal to model/gpt*.cpp: the definitions of Gpt's private nested types (activation storage of
// slots and of the recompute workspace, the weight stash, scratch) shared by gpt.cpp (storage,
// embedding, head, the passes) and gpt_block.cpp (the block's views of them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace strata {

// The activations a block saves for its backward pass, packed layer after layer for the current
// micro-batch. N = B·T rows in all, Nl = rows of the residual stream on this rank; Cl = C/tp
// channels of this rank's heads, Hl = 4C/tp of its MLP columns. A slot holds these for the layers
// whose activations recomputation keeps (all, none, or only the non-attention ones); the
// recompute workspace holds one layer of what it drops.
template <class T>
struct Gpt<T>::LayerActivations {
  // Attention internals, the largest part for long contexts: dropped by selective and full.
  std::vector<T> qkv;   // (L, N, 3Cl)
  std::vector<T> atty;  // (L, N, Cl) attention output before the projection
  // The rest: dropped by full only.
  std::vector<T> residual2;                               // (L, Nl, C) after the attention add
  std::vector<T> ln1, ln2;                                // (L, Nl, C)
  std::vector<T> ln1_full, ln2_full;                      // (L, N, C) gathered (sequence parallel)
  std::vector<T> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // (L, Nl)
  std::vector<T> fch, fch_gelu;                           // (L, N, Hl)

  std::size_t elements() const {
    std::size_t n = 0;
    for (const std::vector<T>* v : {&qkv, &atty, &residual2, &ln1, &ln2, &ln1_full, &ln2_full,
                                    &ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd, &fch, &fch_gelu})
      n += v->size();
    return n;
  }
};

// What the split backward's input pass leaves for its weight pass (docs/ARCHITECTURE.md §5), for
// L layers packed layer after layer: the activation gradients the weight gradients are computed
// from, and copies of the activations they read that recomputation dropped (the workspace holds
// one layer only, and the weight pass may run after other layers were recomputed). The fused
// backward keeps one layer of the gradients in Scratch and no copies.
template <class T>
struct Gpt<T>::WeightStash {
  std::vector<T> dz, dy;      // (L, N, C) output gradients of the MLP's and attention's projections
  std::vector<T> dfch;        // (L, N, Hl) gradient of the fc output (before GELU)
  std::vector<T> dqkv;        // (L, N, 3Cl)
  std::vector<T> dln1, dln2;  // (L, Nl, C) gradients of the LayerNorm outputs
  // Copies of dropped activations: atty (selective and full recompute), the rest (full only).
  std::vector<T> atty;                // (L, N, Cl)
  std::vector<T> x2;                  // (L, Nl, C)
  std::vector<T> ln1_full, ln2_full;  // (L, N, C) all rows of the LayerNorm outputs
  std::vector<T> fch_gelu;            // (L, N, Hl)
  std::vector<T> ln_stats;            // (L, 4, Nl) ln1 mean, rstd, ln2 mean, rstd
  std::vector<T> dlnf;                // (Nl, C) last stage: gradient of the final LayerNorm
  std::vector<T> dembed;              // (N, C) first stage: of the embedding's output, all rows

  std::size_t elements() const {
    std::size_t n = 0;
    for (const std::vector<T>* v : {&dz, &dy, &dfch, &dqkv, &dln1, &dln2, &atty, &x2, &ln1_full,
                                    &ln2_full, &fch_gelu, &ln_stats, &dlnf, &dembed})
      n += v->size();
    return n;
  }
};

// One micro-batch's saved activations.
template <class T>
struct Gpt<T>::Slot : SlotState {
  std::vector<std::int32_t> tokens, targets;  // (N)
  std::vector<T> residual;                    // (L+1, Nl, C): block inputs, then stage output
  LayerActivations layers;                    // what recomputation keeps
  std::vector<T> lnf, lnf_full, lnf_mean, lnf_rstd;  // (Nl, C), (N, C), (Nl)
  std::vector<T> logits;                             // (N, Vp/tp)
  std::vector<T> losses;                             // (N)
  std::vector<T> ce_stats;    // none: the cross-entropy leaves probabilities in the logits instead
  std::vector<T> input_grad;  // (Nl, C)
  WeightStash stash;          // split backward only: from the input pass to the weight pass
  // Per layer, an MoE block's micro-batch (empty for dense blocks): kept under every recompute
  // mode (a full recompute reruns the experts into it, to the same values).
  std::vector<MoeActivations<T>> moe;
  T loss_scale = 1;  // of the backward under way: the MoE losses' gradients take it too

  std::size_t elements() const {
    std::size_t n = layers.elements() + stash.elements();
    for (const MoeActivations<T>& m : moe) n += m.elements();
    for (const std::vector<T>* v :
         {&residual, &lnf, &lnf_full, &lnf_mean, &lnf_rstd, &logits, &losses, &input_grad})
      n += v->size();
    return n;
  }
};

// Backward and communication scratch shared by all slots, and the recompute workspace (one
// micro-batch is recomputed at a time, whichever slot it is in).
template <class T>
struct Gpt<T>::Scratch {
  std::vector<T> dresidual;          // (Nl, C)
  std::vector<T> dfull;              // (N, C)
  std::vector<T> partial;            // (N, C): row-parallel partial sums, the embedding's lookup
  std::vector<T> reduced;            // (Nl, C)
  std::vector<T> datty;              // (N, Cl)
  WeightStash stash;                 // one layer, no copies: the fused backward's
  LayerActivations recomputed;       // one layer of what the slots drop
  std::vector<T> recomputed_output;  // (Nl, C) the block output a full recompute produces again
};

}  // namespace strata
