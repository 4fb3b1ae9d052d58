#include "model/activation_sizes.h"

#include <algorithm>

#include "model/moe/moe_routing.h"

namespace strata {
namespace {

// One layer's LayerActivations: the attention part (dropped by selective and full recompute) and
// the rest (dropped by full).
struct LayerElements {
  std::size_t attention = 0, rest = 0;
};

}  // namespace

std::size_t moe_balanced_assignments(const MoeConfig& moe, int tokens, int seq_len) {
  if (!moe.enabled() || tokens == 0) return 0;
  const int group = capacity_group_tokens(tokens, seq_len, moe.group_sequences);
  const std::size_t groups = static_cast<std::size_t>(tokens / group);
  const std::size_t chosen = static_cast<std::size_t>(group) * moe.top_k;
  const std::int64_t capacity = moe.capacity(group);
  if (capacity < 0) return groups * chosen;
  return groups * std::min(chosen, static_cast<std::size_t>(moe.experts) *
                                       static_cast<std::size_t>(capacity));
}

int moe_block_count(const GptShape& shape, const ModelPartition& partition) {
  int blocks = 0;
  for (int c = 0; c < partition.chunks(); ++c) {
    const LayerRange layers = partition.chunk_layers(c);
    for (int l = layers.begin; l < layers.end; ++l) blocks += shape.moe.is_moe_block(l);
  }
  return blocks;
}

ActivationElements activation_elements(const GptShape& shape, const ModelPartition& partition,
                                       int max_batch, Recompute recompute, bool split_backward) {
  const std::size_t tp = static_cast<std::size_t>(partition.tp_size);
  const bool sequence_parallel = partition.sequence_parallel && tp > 1;
  // This rank's rows of each sequence (context parallelism holds 1/cp of them).
  const std::size_t N =
      static_cast<std::size_t>(max_batch) * partition.context.local_length(shape.seq_len);
  const std::size_t C = shape.d_model, Cl = C / tp;
  const std::size_t QKVl = shape.qkv_width() / tp, Hl = shape.ffn_width() / tp;
  const std::size_t Fcl = shape.fc_width() / tp;  // the fc product: Hl, or SwiGLU's 2·Hl
  const std::size_t Nl = sequence_parallel ? N / tp : N;
  const std::size_t L = static_cast<std::size_t>(partition.layers());
  const std::size_t moe_blocks = static_cast<std::size_t>(moe_block_count(shape, partition));
  const std::size_t D = L - moe_blocks;  // the dense MLPs' blocks

  LayerElements layer;
  // Attention's (T, T) probabilities are recomputed in the backward pass from each row's
  // log-sum-exp, never kept.
  const std::size_t NHl = static_cast<std::size_t>(shape.n_head) / tp;
  layer.attention = N * QKVl + N * Cl + N * NHl;      // qkv, atty, lse
  layer.rest = 3 * Nl * C +                           // residual2, ln1, ln2
               (sequence_parallel ? 2 * N * C : 0) +  // ln1_full, ln2_full
               4 * Nl;                                // LayerNorm means and rstds
  const std::size_t mlp = N * Fcl + N * Hl;           // fch, fch_gelu: dense blocks only
  const bool drops_attention = recompute != Recompute::none;
  const bool drops_rest = recompute == Recompute::full;

  ActivationElements a;
  a.per_slot = (L + 1) * Nl * C;  // residual: block inputs and the stage output
  if (!drops_attention) a.per_slot += L * layer.attention;
  if (!drops_rest) a.per_slot += L * layer.rest + D * mlp;
  if (partition.has_head)
    a.per_slot += Nl * C + (sequence_parallel ? N * C : 0) + 2 * Nl +  // lnf, lnf_full, stats
                  N * shape.padded_vocab() / tp + N;                   // logits, losses
  if (!partition.has_embedding) a.per_slot += Nl * C;                  // input_grad
  if (split_backward) {  // the weight stash (Gpt::WeightStash)
    a.per_slot +=
        L * (2 * N * C + N * QKVl + 2 * Nl * C) + D * N * Fcl;  // dz, dy, dqkv, dln*; dfch
    if (drops_attention) a.per_slot += L * N * Cl;              // atty copy
    if (drops_rest)
      a.per_slot += L * (Nl * C + 2 * N * C + 4 * Nl) + D * N * Hl;  // x2, ln*; fch_gelu
    if (partition.has_head) a.per_slot += Nl * C;                    // dlnf
    if (partition.has_embedding) a.per_slot += N * C;                // dembed
  }
  // The workspace holds one layer, a dense one's MLP included (when the partition has one).
  a.workspace = (drops_attention ? layer.attention : 0) +
                (drops_rest ? layer.rest + (D > 0 ? mlp : 0) + Nl * C : 0);

  // The MoE blocks' MoeActivations (see the header for the formula and its assumption).
  if (moe_blocks > 0) {
    const std::size_t E = shape.moe.experts, k = shape.moe.top_k;
    const std::size_t A = moe_balanced_assignments(shape.moe, static_cast<int>(N), shape.seq_len);
    const std::size_t R = A;
    a.moe_per_slot =
        moe_blocks * (N * C + 2 * N * E + N + N * k + A * C + 2 * R * C + R * (2 * Fcl + Hl));
  }
  return a;
}

}  // namespace strata
