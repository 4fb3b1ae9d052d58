// Internal to model/gpt*.cpp: the definitions of Gpt's private nested types (parameter views of a
// block, activation storage of slots and of the recompute workspace, scratch) shared by gpt.cpp
// (storage, embedding, head, the passes) and gpt_block.cpp (the transformer block).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace strata {

template <class T>
struct Gpt<T>::Block {
  const T *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *attn_proj_weight, *attn_proj_bias;
  const T *ln2_weight, *ln2_bias, *fc_weight, *fc_bias, *mlp_proj_weight, *mlp_proj_bias;
};

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

// One micro-batch's saved activations.
template <class T>
struct Gpt<T>::Slot : SlotState {
  std::vector<std::int32_t> tokens, targets;  // (N)
  std::vector<T> residual;                    // (L+1, Nl, C): block inputs, then stage output
  LayerActivations layers;                    // what recomputation keeps
  std::vector<T> lnf, lnf_full, lnf_mean, lnf_rstd;  // (Nl, C), (N, C), (Nl)
  std::vector<T> logits;                             // (N, Vp/tp)
  std::vector<T> losses;                             // (N)
  std::vector<T> input_grad;                         // (Nl, C)

  std::size_t elements() const {
    std::size_t n = layers.elements();
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
  std::vector<T> dlocal;             // (Nl, C)
  std::vector<T> dfull;              // (N, C)
  std::vector<T> partial;            // (N, max(C, Hl)): row-parallel partial sums, GELU gradients
  std::vector<T> reduced;            // (Nl, C)
  std::vector<T> datty;              // (N, Cl)
  std::vector<T> dqkv;               // (N, 3Cl)
  std::vector<T> dfch;               // (N, Hl)
  std::vector<T> rows;               // (tp·N) per-row values gathered over the group, (2N) sums
  std::vector<T> dlosses;            // (N)
  std::vector<T> attention;          // attention's per-thread scratch (kernels/cpu/attention.h)
  LayerActivations recomputed;       // one layer of what the slots drop
  std::vector<T> recomputed_output;  // (Nl, C) the block output a full recompute produces again
};

// One layer's activations for the current micro-batch: pointers into the slot where they are
// kept, into the recompute workspace where they are dropped.
template <class T>
struct Gpt<T>::BlockActivations {
  const T* x;  // block input (Nl, C)
  T* out;      // block output (Nl, C)
  T *x2, *ln1, *ln2, *ln1_full, *ln2_full, *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
  T *qkv, *atty, *fch, *fch_gelu;
};

// A named tensor inside a segment's weights (or gradients) that start at `base`.
template <class T>
template <class P>
P* Gpt<T>::in_segment(P* base, int segment, const std::string& name) const {
  return base +
         (layout_.at(name).offset - segments_[static_cast<std::size_t>(segment)].range.begin);
}

}  // namespace strata
