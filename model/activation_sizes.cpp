#include "model/activation_sizes.h"

namespace strata {
namespace {

// One layer's LayerActivations: the attention part (dropped by selective and full recompute) and
// the rest (dropped by full).
struct LayerElements {
  std::size_t attention = 0, rest = 0;
};

}  // namespace

ActivationElements activation_elements(const GptShape& shape, const ModelPartition& partition,
                                       int max_batch, Recompute recompute, bool split_backward) {
  const std::size_t tp = static_cast<std::size_t>(partition.tp_size);
  const bool sequence_parallel = partition.sequence_parallel && tp > 1;
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t C = shape.d_model, Cl = C / tp, Hl = 4 * C / tp;
  const std::size_t Nl = sequence_parallel ? N / tp : N;
  const std::size_t L = static_cast<std::size_t>(partition.layers());

  LayerElements layer;
  // Attention's (T, T) probabilities are recomputed in the backward pass, never kept.
  layer.attention = N * 3 * Cl + N * Cl;              // qkv, atty
  layer.rest = 3 * Nl * C +                           // residual2, ln1, ln2
               (sequence_parallel ? 2 * N * C : 0) +  // ln1_full, ln2_full
               4 * Nl +                               // LayerNorm means and rstds
               2 * N * Hl;                            // fch, fch_gelu
  const bool drops_attention = recompute != Recompute::none;
  const bool drops_rest = recompute == Recompute::full;

  ActivationElements a;
  a.per_slot = (L + 1) * Nl * C;  // residual: block inputs and the stage output
  if (!drops_attention) a.per_slot += L * layer.attention;
  if (!drops_rest) a.per_slot += L * layer.rest;
  if (partition.has_head)
    a.per_slot += Nl * C + (sequence_parallel ? N * C : 0) + 2 * Nl +  // lnf, lnf_full, stats
                  N * shape.padded_vocab() / tp + N;                   // logits, losses
  if (!partition.has_embedding) a.per_slot += Nl * C;                  // input_grad
  if (split_backward) {  // the weight stash (Gpt::WeightStash)
    a.per_slot += L * (2 * N * C + N * Hl + 3 * N * Cl + 2 * Nl * C);  // dz, dy, dfch, dqkv, dln*
    if (drops_attention) a.per_slot += L * N * Cl;                     // atty copy
    if (drops_rest) a.per_slot += L * (Nl * C + 2 * N * C + N * Hl + 4 * Nl);  // x2, ln*, fch_gelu
    if (partition.has_head) a.per_slot += Nl * C;                              // dlnf
    if (partition.has_embedding) a.per_slot += N * C;                          // dembed
  }
  a.workspace = (drops_attention ? layer.attention : 0) + (drops_rest ? layer.rest + Nl * C : 0);
  return a;
}

}  // namespace strata
