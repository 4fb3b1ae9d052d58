// The transformer block of Gpt (see gpt.h) over its storage: where a block's activations and its
// stash layer live under each recompute mode, as the shared passes (model/gpt_passes.h,
// model/gpt_block_pass.h) see them.
#include <algorithm>
#include <string>
#include <utility>

#include "model/gpt.h"
#include "model/gpt_storage.h"

namespace strata {

template <class T>
typename Gpt<T>::Block::Activations Gpt<T>::layer(Slot& s, int l, bool recomputing) {
  const int tp = partition_.tp_size, N = s.batch * s.time,
            Nl = this->activation_rows(s.batch, s.time);
  const long C = shape_.d_model, Cl = C / tp, Hl = 4 * C / tp;
  const bool keep_attention = options_.recompute == Recompute::none;
  const bool keep_rest = options_.recompute != Recompute::full;
  LayerActivations& kept = s.layers;
  LayerActivations& work = scratch_->recomputed;
  // Layer l's part of a kept buffer (per_layer elements each), or the workspace's single layer.
  auto at = [l](std::vector<T>& kept_buffer, std::vector<T>& work_buffer, bool keep,
                long per_layer) {
    return keep ? kept_buffer.data() + l * per_layer : work_buffer.data();
  };
  auto rest = [&](std::vector<T> LayerActivations::*buffer, long per_layer) {
    return at(kept.*buffer, work.*buffer, keep_rest, per_layer);
  };
  auto attention = [&](std::vector<T> LayerActivations::*buffer, long per_layer) {
    return at(kept.*buffer, work.*buffer, keep_attention, per_layer);
  };
  using A = LayerActivations;
  const long stride = Nl * C;
  typename Block::Activations a{};
  a.x = s.residual.data() + l * stride;
  a.out = recomputing ? scratch_->recomputed_output.data() : s.residual.data() + (l + 1) * stride;
  a.x2 = rest(&A::residual2, stride);
  a.ln1 = rest(&A::ln1, stride);
  a.ln2 = rest(&A::ln2, stride);
  if (sequence_parallel_) {
    a.ln1_full = rest(&A::ln1_full, N * C);
    a.ln2_full = rest(&A::ln2_full, N * C);
  }
  a.ln1_mean = rest(&A::ln1_mean, Nl);
  a.ln1_rstd = rest(&A::ln1_rstd, Nl);
  a.ln2_mean = rest(&A::ln2_mean, Nl);
  a.ln2_rstd = rest(&A::ln2_rstd, Nl);
  if (!is_moe(l)) {  // the dense MLP's buffers, kept by dense blocks only
    const long dense = dense_index_[static_cast<std::size_t>(l)];
    a.fch = keep_rest ? kept.fch.data() + dense * N * Hl : work.fch.data();
    a.fch_gelu = keep_rest ? kept.fch_gelu.data() + dense * N * Hl : work.fch_gelu.data();
  }
  a.qkv = attention(&A::qkv, 3 * N * Cl);
  a.atty = attention(&A::atty, N * Cl);
  a.moe = is_moe(l) ? &s.moe[static_cast<std::size_t>(l)] : nullptr;
  return a;
}

// Scratch's stash has one layer (at 0) and no copies; a slot's has every layer, with the copies
// its recomputation needs, the dense MLP's arrays for dense blocks only (at their dense index).
template <class T>
typename Gpt<T>::Block::Stash Gpt<T>::stash_layer(const Slot& s, WeightStash& w, int l, int at) {
  const int tp = partition_.tp_size;
  const long N = static_cast<long>(s.batch) * s.time, Nl = this->activation_rows(s.batch, s.time);
  const long C = shape_.d_model, Cl = C / tp, Hl = 4 * C / tp;
  const long mlp_at = &w == &scratch_->stash ? 0 : dense_index_[static_cast<std::size_t>(l)];
  // Layer i of `v` (per_layer elements each); null where `w` has no such array.
  auto part = [](std::vector<T>& v, long i, long per_layer) {
    return v.empty() ? nullptr : v.data() + i * per_layer;
  };
  const bool mlp = !is_moe(l);
  typename Block::Stash stash;
  stash.dz = part(w.dz, at, N * C);
  stash.dy = part(w.dy, at, N * C);
  stash.dfch = mlp ? part(w.dfch, mlp_at, N * Hl) : nullptr;
  stash.dqkv = part(w.dqkv, at, N * 3 * Cl);
  stash.dln1 = part(w.dln1, at, Nl * C);
  stash.dln2 = part(w.dln2, at, Nl * C);
  stash.atty = part(w.atty, at, N * Cl);
  stash.x2 = part(w.x2, at, Nl * C);
  stash.ln1_full = part(w.ln1_full, at, N * C);
  stash.ln2_full = part(w.ln2_full, at, N * C);
  stash.fch_gelu = mlp ? part(w.fch_gelu, mlp_at, N * Hl) : nullptr;
  if (T* stats = part(w.ln_stats, at, 4 * Nl)) {  // ln1 mean, rstd, ln2 mean, rstd
    stash.ln1_mean = stats;
    stash.ln1_rstd = stats + Nl;
    stash.ln2_mean = stats + 2 * Nl;
    stash.ln2_rstd = stats + 3 * Nl;
  }
  return stash;
}

template <class T>
T Gpt<T>::moe_loss(int slot) const {
  return this->moe_loss_of(*slots_.at(static_cast<std::size_t>(slot)));
}

#define STRATA_INSTANTIATE_GPT_BLOCK(T)                                                   \
  template Gpt<T>::Block::Activations Gpt<T>::layer(Slot&, int, bool);                    \
  template Gpt<T>::Block::Stash Gpt<T>::stash_layer(const Slot&, WeightStash&, int, int); \
  template T Gpt<T>::moe_loss(int) const;
STRATA_INSTANTIATE_GPT_BLOCK(float)
STRATA_INSTANTIATE_GPT_BLOCK(double)
#undef STRATA_INSTANTIATE_GPT_BLOCK

}  // namespace strata
