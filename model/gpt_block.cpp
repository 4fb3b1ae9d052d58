// The transformer block of Gpt (see gpt.h): where its activations live under each recompute
// mode, its forward, and its backward, which first recomputes what the forward dropped.
#include <algorithm>
#include <string>
#include <utility>

#include "model/gpt.h"
#include "model/gpt_storage.h"

namespace strata {

template <class T>
typename Gpt<T>::Block Gpt<T>::block_params(const T* base, int layer) const {
  const std::string h = "h." + std::to_string(layer) + ".";
  const int seg = block_segment(layer - partition_.layer_begin);
  auto at = [&](const std::string& name) { return in_segment(base, seg, h + name); };
  // An MoE block has its router (the experts after it) where a dense one has its MLP.
  const bool moe = shape_.moe.is_moe_block(layer);
  auto mlp = [&](const char* name) { return moe ? nullptr : at(std::string("mlp.") + name); };
  return Block{at("ln1.weight"),
               at("ln1.bias"),
               at("attn.qkv.weight"),
               at("attn.qkv.bias"),
               at("attn.proj.weight"),
               at("attn.proj.bias"),
               at("ln2.weight"),
               at("ln2.bias"),
               mlp("fc.weight"),
               mlp("fc.bias"),
               mlp("proj.weight"),
               mlp("proj.bias"),
               moe ? at("moe.router.weight") : nullptr};
}

template <class T>
typename Gpt<T>::BlockActivations Gpt<T>::block_activations(Slot& s, int l, bool recomputing) {
  const int tp = partition_.tp_size, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
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
  BlockActivations a{};
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

// Every op output below is rounded to the compute dtype by its op (ops_) before the next op reads
// it; GEMMs and reductions (including the tensor-parallel sums of partial outputs) accumulate in T.
template <class T>
void Gpt<T>::block_forward(const BlockActivations& a, int B, int T_, const Block& p) {
  const int C = shape_.d_model, tp = partition_.tp_size;
  const int Hl = 4 * C / tp;
  const int N = B * T_, Nl = activation_rows(B, T_);
  T* partial = scratch_->partial.data();

  // Attention: x2 = x + proj(attn(qkv(ln1(x))))
  ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, p.ln1_weight, p.ln1_bias, Nl, C);
  attention_core_forward(a, B, T_, p, ops_.gather_rows(a.ln1, a.ln1_full, N, C));  // (N, Cl)
  ops_.matmul_forward(partial, nullptr, a.atty, p.attn_proj_weight, nullptr, N, C / tp, C,
                      Epilogue::bias);
  const T* y = ops_.sum_rows(partial, scratch_->reduced.data(), N, C);  // (Nl, C)
  // x2 = x + y + bias and ln2(x2), both rounded, in one pass over each row.
  ops_.residual_layernorm_forward(a.x2, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, y, p.attn_proj_bias,
                                  p.ln2_weight, p.ln2_bias, Nl, C);

  // MLP: next = x2 + proj(gelu(fc(ln2(x2)))), or the experts: next = x2 + moe(ln2(x2)), their
  // biases inside (model/moe/moe_layer.h).
  const T* ln2_full = ops_.gather_rows(a.ln2, a.ln2_full, N, C);
  if (a.moe != nullptr) {
    moe_->forward(*a.moe, ln2_full, N, T_, p.moe, partial);  // this rank's part, rounded
    const T* z = ops_.sum_rows(partial, scratch_->reduced.data(), N, C);
    ops_.residual_bias_forward(a.out, a.x2, z, nullptr, Nl, C);
    return;
  }
  // (N, Hl) each: the bias after the bias-free product, with the GELU in one pass.
  ops_.matmul_forward(a.fch_gelu, a.fch, ln2_full, p.fc_weight, p.fc_bias, N, C, Hl,
                      Epilogue::bias_gelu);
  ops_.matmul_forward(partial, nullptr, a.fch_gelu, p.mlp_proj_weight, nullptr, N, Hl, C,
                      Epilogue::bias);
  const T* z = ops_.sum_rows(partial, scratch_->reduced.data(), N, C);
  ops_.residual_bias_forward(a.out, a.x2, z, p.mlp_proj_bias, Nl, C);
}

// ln1 (all N rows) → qkv → attention output: the part selective recomputation
// reruns in the backward pass (from the kept ln1 rows, no communication), one function for both.
template <class T>
void Gpt<T>::attention_core_forward(const BlockActivations& a, int B, int T_, const Block& p,
                                    const T* ln1_full) {
  const int C = shape_.d_model, tp = partition_.tp_size;
  const int Cl = C / tp, NHl = shape_.n_head / tp, N = B * T_;
  ops_.matmul_forward(a.qkv, nullptr, ln1_full, p.qkv_weight, p.qkv_bias, N, C, 3 * Cl,
                      Epilogue::bias);                             // (N, 3Cl)
  ops_.attention_forward(a.atty, nullptr, a.qkv, B, T_, Cl, NHl);  // (N, Cl)
}

// The input half of the block's backward: activation gradients, rounded to the compute dtype like
// the forward's outputs, from dresidual = d(loss)/d(block output) down to d(loss)/d(block input).
// What the weight half reads goes to stash layer `at` of `w`: the gradients of the projections'
// outputs, of the fc output and of both LayerNorm outputs, and (a slot's stash only) copies of
// the activations recomputation dropped.
template <class T>
void Gpt<T>::block_backward_input(Slot& s, ParameterAccess<T>& parameters, int l, WeightStash& w,
                                  int at) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int Cl = C / tp, Hl = 4 * C / tp, NHl = shape_.n_head / tp;
  const int N = B * T_, Nl = activation_rows(B, T_);
  const long rows = static_cast<long>(Nl) * C, full = static_cast<long>(N) * C;
  const int layer = partition_.layer_begin + l;
  const int segment = block_segment(l);
  // One acquisition of the weights serves the recomputation and the backward pass.
  const Block p = block_params(parameters.acquire_weights(segment, WeightUse::backward), layer);
  const BlockActivations a = block_activations(s, l, true);
  // Bring back what the forward dropped, by the forward's own code on the same inputs.
  if (options_.recompute == Recompute::full)
    block_forward(a, B, T_, p);
  else if (options_.recompute == Recompute::selective)
    attention_core_forward(a, B, T_, p, sequence_parallel_ ? a.ln1_full : a.ln1);
  const BlockWeightInputs in = block_weight_inputs(s, l, w, at);
  if (&w != &scratch_->stash) {  // the weight half runs later: keep what the workspace will lose
    auto keep = [this](const T* from, T* to, long n) {
      if (from != to) ops_.copy(to, from, static_cast<std::size_t>(n));
    };
    keep(a.atty, in.atty, static_cast<long>(N) * Cl);
    keep(a.x2, in.x2, rows);
    keep(sequence_parallel_ ? a.ln1_full : a.ln1, in.ln1_full, full);
    keep(sequence_parallel_ ? a.ln2_full : a.ln2, in.ln2_full, full);
    if (!is_moe(l)) keep(a.fch_gelu, in.fch_gelu, static_cast<long>(N) * Hl);
    for (const auto& [from, to] :
         {std::pair{a.ln1_mean, in.ln1_mean}, std::pair{a.ln1_rstd, in.ln1_rstd},
          std::pair{a.ln2_mean, in.ln2_mean}, std::pair{a.ln2_rstd, in.ln2_rstd}})
      keep(from, to, Nl);
  }
  Scratch& x_ = *scratch_;
  T* dres = x_.dresidual.data();  // running d(loss)/d(residual stream), (Nl, C)
  // Row-parallel partial sums: summed in place when rows are not split, else reduce-scattered.
  auto partial_of = [&](T* local) { return sequence_parallel_ ? x_.dfull.data() : local; };

  // MLP: next = x2 + proj(gelu(fc(ln2(x2)))) + bias, or the experts (their activation gradients
  // stay in the slot's MoeActivations for the weight half).
  ops_.gather_rows_into(dres, in.dz, N, C);  // (N, C)
  T* dln2_partial = partial_of(in.dln2);
  if (a.moe != nullptr) {
    moe_->backward_input(*a.moe, in.dz, s.loss_scale, p.moe, dln2_partial);  // rounded
    MoeTotals::add(moe_totals_.data(), layer, shape_.moe.experts, a.moe->stats);
  } else {
    ops_.matmul_backward_input(in.dfch, in.dz, p.mlp_proj_weight, a.fch, N, Hl, C);  // GELU'
    ops_.matmul_backward_input(dln2_partial, in.dfch, p.fc_weight, nullptr, N, C, Hl);
  }
  ops_.sum_rows(dln2_partial, in.dln2, N, C);  // (Nl, C)
  ops_.layernorm_backward_input(dres, in.dln2, a.x2, p.ln2_weight, a.ln2_mean, a.ln2_rstd, Nl, C);

  // Attention: x2 = x + proj(attn(qkv(ln1(x)))) + bias
  ops_.gather_rows_into(dres, in.dy, N, C);
  ops_.matmul_backward_input(x_.datty.data(), in.dy, p.attn_proj_weight, nullptr, N, Cl, C);
  ops_.attention_backward(in.dqkv, x_.datty.data(), a.qkv, a.atty, nullptr, B, T_, Cl, NHl);
  T* dln1_partial = partial_of(in.dln1);
  ops_.matmul_backward_input(dln1_partial, in.dqkv, p.qkv_weight, nullptr, N, C, 3 * Cl);
  ops_.sum_rows(dln1_partial, in.dln1, N, C);
  ops_.layernorm_backward_input(dres, in.dln1, a.x, p.ln1_weight, a.ln1_mean, a.ln1_rstd, Nl, C);
  parameters.release_weights(segment);
}

// Layer l's weight-gradient inputs in stash layer `at` of `w`: activations the slot keeps are read
// where they are; dropped ones from the workspace when `w` is Scratch's (the weight half follows
// at once) or from the slot stash's copies.
template <class T>
typename Gpt<T>::BlockWeightInputs Gpt<T>::block_weight_inputs(Slot& s, int l, WeightStash& w,
                                                               int at) {
  const int tp = partition_.tp_size, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  const long C = shape_.d_model, Cl = C / tp, Hl = 4 * C / tp;
  const BlockActivations a = block_activations(s, l, true);
  // The dense MLP's stash entries: the slot stash keeps dense blocks only; Scratch's has one.
  const long mlp_at = &w == &scratch_->stash ? 0 : dense_index_[static_cast<std::size_t>(l)];
  BlockWeightInputs in{};
  in.x = a.x;
  in.x2 = a.x2;
  in.ln1_full = sequence_parallel_ ? a.ln1_full : a.ln1;
  in.ln2_full = sequence_parallel_ ? a.ln2_full : a.ln2;
  in.atty = a.atty;
  in.fch_gelu = a.fch_gelu;
  in.ln1_mean = a.ln1_mean;
  in.ln1_rstd = a.ln1_rstd;
  in.ln2_mean = a.ln2_mean;
  in.ln2_rstd = a.ln2_rstd;
  if (&w != &scratch_->stash) {
    if (options_.recompute != Recompute::none) in.atty = w.atty.data() + at * N * Cl;
    if (options_.recompute == Recompute::full) {
      in.x2 = w.x2.data() + at * Nl * C;
      in.ln1_full = w.ln1_full.data() + at * N * C;
      in.ln2_full = w.ln2_full.data() + at * N * C;
      if (!is_moe(l)) in.fch_gelu = w.fch_gelu.data() + mlp_at * N * Hl;
      T* stats = w.ln_stats.data() + at * 4L * Nl;
      in.ln1_mean = stats;
      in.ln1_rstd = stats + Nl;
      in.ln2_mean = stats + 2L * Nl;
      in.ln2_rstd = stats + 3L * Nl;
    }
  }
  in.dz = w.dz.data() + at * N * C;
  in.dy = w.dy.data() + at * N * C;
  if (!is_moe(l)) in.dfch = w.dfch.data() + mlp_at * N * Hl;
  in.dqkv = w.dqkv.data() + at * N * 3 * Cl;
  in.dln1 = w.dln1.data() + at * Nl * C;
  in.dln2 = w.dln2.data() + at * Nl * C;
  return in;
}

// The weight half: every parameter gradient of the block, added (+=) in T, by the kernels the
// fused backward used (matmul_backward and layernorm_backward are exactly their two halves).
template <class T>
void Gpt<T>::block_backward_weight(Slot& s, ParameterAccess<T>& parameters, int l,
                                   const BlockWeightInputs& in) {
  const int C = shape_.d_model, tp = partition_.tp_size, Cl = C / tp, Hl = 4 * C / tp;
  const int N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  const int layer = partition_.layer_begin + l;
  const int segment = block_segment(l);
  T* grads = parameters.acquire_gradients(segment);
  const std::string h = "h." + std::to_string(layer) + ".";
  auto g = [&](const char* name) { return in_segment(grads, segment, h + name); };
  // A row-parallel layer's bias (and the router's gradient) is replicated: each rank adds its own
  // rows' share (all of them without sequence parallelism, Nl = N), found at its place among the
  // gathered rows.
  const RowRange own_rows{sequence_parallel_ ? partition_.tp_rank * Nl : 0, Nl};

  if (is_moe(l)) {
    moe_->backward_weight(s.moe[static_cast<std::size_t>(l)], g("moe.router.weight"),
                          own_rows.begin, own_rows.count);
  } else {
    ops_.matmul_backward_weight_rows(g("mlp.proj.weight"), g("mlp.proj.bias"), in.dz, in.fch_gelu,
                                     N, Hl, C, own_rows);
    ops_.matmul_backward_weight(g("mlp.fc.weight"), g("mlp.fc.bias"), in.dfch, in.ln2_full, N, C,
                                Hl);
  }
  ops_.layernorm_backward_weight(g("ln2.weight"), g("ln2.bias"), in.dln2, in.x2, in.ln2_mean,
                                 in.ln2_rstd, Nl, C);
  ops_.matmul_backward_weight_rows(g("attn.proj.weight"), g("attn.proj.bias"), in.dy, in.atty, N,
                                   Cl, C, own_rows);
  ops_.matmul_backward_weight(g("attn.qkv.weight"), g("attn.qkv.bias"), in.dqkv, in.ln1_full, N, C,
                              3 * Cl);
  ops_.layernorm_backward_weight(g("ln1.weight"), g("ln1.bias"), in.dln1, in.x, in.ln1_mean,
                                 in.ln1_rstd, Nl, C);
  parameters.release_gradients(segment);
}

template <class T>
T Gpt<T>::moe_loss(int slot) const {
  T sum = 0;
  if (!moe_) return sum;
  for (const MoeActivations<T>& a : slots_.at(static_cast<std::size_t>(slot))->moe)
    if (a.tokens > 0) sum += moe_->loss(a);  // dense blocks leave theirs empty
  return sum;
}

template <class T>
void Gpt<T>::take_moe_totals(std::vector<double>& totals) {
  if (!moe_) return;
  totals.resize(moe_totals_.size(), 0.0);
  for (std::size_t i = 0; i < totals.size(); ++i) totals[i] += moe_totals_[i];
  std::fill(moe_totals_.begin(), moe_totals_.end(), 0.0);
}

#define STRATA_INSTANTIATE_GPT_BLOCK(T)                                                           \
  template Gpt<T>::Block Gpt<T>::block_params(const T*, int) const;                               \
  template Gpt<T>::BlockActivations Gpt<T>::block_activations(Slot&, int, bool);                  \
  template void Gpt<T>::block_forward(const BlockActivations&, int, int, const Block&);           \
  template void Gpt<T>::attention_core_forward(const BlockActivations&, int, int, const Block&,   \
                                               const T*);                                         \
  template void Gpt<T>::block_backward_input(Slot&, ParameterAccess<T>&, int, WeightStash&, int); \
  template Gpt<T>::BlockWeightInputs Gpt<T>::block_weight_inputs(Slot&, int, WeightStash&, int);  \
  template void Gpt<T>::block_backward_weight(Slot&, ParameterAccess<T>&, int,                    \
                                              const BlockWeightInputs&);                          \
  template T Gpt<T>::moe_loss(int) const;                                                         \
  template void Gpt<T>::take_moe_totals(std::vector<double>&);
STRATA_INSTANTIATE_GPT_BLOCK(float)
STRATA_INSTANTIATE_GPT_BLOCK(double)
#undef STRATA_INSTANTIATE_GPT_BLOCK

}  // namespace strata
