// The transformer block of Gpt (see gpt.h): where its activations live under each recompute
// mode, its forward, and its backward, which first recomputes what the forward dropped.
#include <string>

#include "model/gpt.h"
#include "model/gpt_storage.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/residual.h"

namespace strata {

using namespace cpu;

template <class T>
typename Gpt<T>::Block Gpt<T>::block_params(const T* base, int layer) const {
  const std::string h = "h." + std::to_string(layer) + ".";
  const int seg = block_segment(layer - partition_.layer_begin);
  auto at = [&](const char* name) { return in_segment(base, seg, h + name); };
  return Block{at("ln1.weight"),    at("ln1.bias"),         at("attn.qkv.weight"),
               at("attn.qkv.bias"), at("attn.proj.weight"), at("attn.proj.bias"),
               at("ln2.weight"),    at("ln2.bias"),         at("mlp.fc.weight"),
               at("mlp.fc.bias"),   at("mlp.proj.weight"),  at("mlp.proj.bias")};
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
  a.fch = rest(&A::fch, N * Hl);
  a.fch_gelu = rest(&A::fch_gelu, N * Hl);
  a.qkv = attention(&A::qkv, 3 * N * Cl);
  a.atty = attention(&A::atty, N * Cl);
  return a;
}

// Every op output below is rounded to the compute dtype before the next op reads it; GEMMs and
// reductions (including the tensor-parallel sums of partial outputs) accumulate in T.
template <class T>
void Gpt<T>::block_forward(const BlockActivations& a, int B, int T_, const Block& p) {
  const int C = shape_.d_model, tp = partition_.tp_size;
  const int Hl = 4 * C / tp;
  const int N = B * T_, Nl = activation_rows(B, T_);
  const long rows = static_cast<long>(Nl) * C, full = static_cast<long>(N) * C;
  T* partial = scratch_->partial.data();

  // Attention: x2 = x + proj(attn(qkv(ln1(x))))
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, p.ln1_weight, p.ln1_bias, Nl, C);
  round_to_compute(a.ln1, rows);                                              // (Nl, C)
  attention_core_forward(a, B, T_, p, gather_rows(a.ln1, a.ln1_full, N, C));  // (N, Cl)
  matmul_forward(partial, a.atty, p.attn_proj_weight, static_cast<const T*>(nullptr), N, C / tp, C);
  round_to_compute(partial, full);
  const T* y = sum_rows(partial, scratch_->reduced.data(), N, C);  // (Nl, C)
  // x2 = x + y + bias and ln2(x2), both rounded, in one pass over each row.
  residual_layernorm_forward(a.x2, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, y, p.attn_proj_bias,
                             p.ln2_weight, p.ln2_bias, Nl, C, options_.compute);

  // MLP: next = x2 + proj(gelu(fc(ln2(x2))))
  const T* ln2_full = gather_rows(a.ln2, a.ln2_full, N, C);
  matmul_forward(a.fch, ln2_full, p.fc_weight, static_cast<const T*>(nullptr), N, C, Hl);
  bias_gelu_forward(a.fch_gelu, a.fch, p.fc_bias, N, Hl, options_.compute);  // (N, Hl) each
  matmul_forward(partial, a.fch_gelu, p.mlp_proj_weight, static_cast<const T*>(nullptr), N, Hl, C);
  round_to_compute(partial, full);
  const T* z = sum_rows(partial, scratch_->reduced.data(), N, C);
  residual_bias_forward(a.out, a.x2, z, p.mlp_proj_bias, Nl, C);
  round_to_compute(a.out, rows);
}

// ln1 (all N rows) → qkv → attention output: the part selective recomputation
// reruns in the backward pass (from the kept ln1 rows, no communication), one function for both.
template <class T>
void Gpt<T>::attention_core_forward(const BlockActivations& a, int B, int T_, const Block& p,
                                    const T* ln1_full) {
  const int C = shape_.d_model, tp = partition_.tp_size;
  const int Cl = C / tp, NHl = shape_.n_head / tp, N = B * T_;
  matmul_forward(a.qkv, ln1_full, p.qkv_weight, p.qkv_bias, N, C, 3 * Cl);  // (N, 3Cl)
  round_to_compute(a.qkv, 3 * static_cast<long>(N) * Cl);
  attention_forward(a.atty, a.qkv, B, T_, Cl, NHl, scratch_->attention);  // (N, Cl)
  round_to_compute(a.atty, static_cast<long>(N) * Cl);
}

// Activation gradients are rounded to the compute dtype like the forward's outputs; parameter
// gradients accumulate in T.
template <class T>
void Gpt<T>::block_backward(Slot& s, ParameterAccess<T>& parameters, int l) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int Cl = C / tp, Hl = 4 * C / tp, NHl = shape_.n_head / tp;
  const int N = B * T_, Nl = activation_rows(B, T_);
  const long rows = static_cast<long>(Nl) * C, full = static_cast<long>(N) * C;
  const int layer = partition_.layer_begin + l;
  const int segment = block_segment(l);
  // One acquisition of the weights serves the recomputation and the backward pass.
  const Block p = block_params(parameters.acquire_weights(segment, WeightUse::backward), layer);
  T* grads = parameters.acquire_gradients(segment);
  const std::string h = "h." + std::to_string(layer) + ".";
  auto g = [&](const char* name) { return in_segment(grads, segment, h + name); };
  const BlockActivations a = block_activations(s, l, true);
  // Bring back what the forward dropped, by the forward's own code on the same inputs.
  if (options_.recompute == Recompute::full)
    block_forward(a, B, T_, p);
  else if (options_.recompute == Recompute::selective)
    attention_core_forward(a, B, T_, p, sequence_parallel_ ? a.ln1_full : a.ln1);
  const T* ln1_full = sequence_parallel_ ? a.ln1_full : a.ln1;
  const T* ln2_full = sequence_parallel_ ? a.ln2_full : a.ln2;
  Scratch& x_ = *scratch_;
  T* dres = x_.dresidual.data();  // running d(loss)/d(residual stream), (Nl, C)
  T* dfch_gelu = x_.partial.data();

  // MLP: next = x2 + proj(gelu(fc(ln2(x2)))) + bias
  bias_backward(g("mlp.proj.bias"), dres, Nl, C);
  const T* dz = gather_rows(dres, x_.dfull.data(), N, C);  // (N, C)
  matmul_backward(dfch_gelu, g("mlp.proj.weight"), static_cast<T*>(nullptr), dz, a.fch_gelu,
                  p.mlp_proj_weight, N, Hl, C);
  round_to_compute(dfch_gelu, static_cast<long>(N) * Hl);
  gelu_backward(x_.dfch.data(), a.fch, dfch_gelu, static_cast<long>(N) * Hl);
  round_to_compute(x_.dfch.data(), static_cast<long>(N) * Hl);
  matmul_backward(x_.dfull.data(), g("mlp.fc.weight"), g("mlp.fc.bias"), x_.dfch.data(), ln2_full,
                  p.fc_weight, N, C, Hl);
  round_to_compute(x_.dfull.data(), full);
  const T* dln2 = sum_rows(x_.dfull.data(), x_.dlocal.data(), N, C);  // (Nl, C)
  layernorm_backward(dres, g("ln2.weight"), g("ln2.bias"), dln2, a.x2, p.ln2_weight, a.ln2_mean,
                     a.ln2_rstd, Nl, C);
  round_to_compute(dres, rows);

  // Attention: x2 = x + proj(attn(qkv(ln1(x)))) + bias
  bias_backward(g("attn.proj.bias"), dres, Nl, C);
  const T* dy = gather_rows(dres, x_.dfull.data(), N, C);
  matmul_backward(x_.datty.data(), g("attn.proj.weight"), static_cast<T*>(nullptr), dy, a.atty,
                  p.attn_proj_weight, N, Cl, C);
  round_to_compute(x_.datty.data(), static_cast<long>(N) * Cl);
  attention_backward(x_.dqkv.data(), x_.datty.data(), a.qkv, B, T_, Cl, NHl, options_.compute,
                     x_.attention);
  round_to_compute(x_.dqkv.data(), 3 * static_cast<long>(N) * Cl);
  matmul_backward(x_.dfull.data(), g("attn.qkv.weight"), g("attn.qkv.bias"), x_.dqkv.data(),
                  ln1_full, p.qkv_weight, N, C, 3 * Cl);
  round_to_compute(x_.dfull.data(), full);
  const T* dln1 = sum_rows(x_.dfull.data(), x_.dlocal.data(), N, C);
  layernorm_backward(dres, g("ln1.weight"), g("ln1.bias"), dln1, a.x, p.ln1_weight, a.ln1_mean,
                     a.ln1_rstd, Nl, C);
  parameters.release_weights(segment);
  parameters.release_gradients(segment);
  round_to_compute(dres, rows);
}

#define STRATA_INSTANTIATE_GPT_BLOCK(T)                                                         \
  template Gpt<T>::Block Gpt<T>::block_params(const T*, int) const;                             \
  template Gpt<T>::BlockActivations Gpt<T>::block_activations(Slot&, int, bool);                \
  template void Gpt<T>::block_forward(const BlockActivations&, int, int, const Block&);         \
  template void Gpt<T>::attention_core_forward(const BlockActivations&, int, int, const Block&, \
                                               const T*);                                       \
  template void Gpt<T>::block_backward(Slot&, ParameterAccess<T>&, int);
STRATA_INSTANTIATE_GPT_BLOCK(float)
STRATA_INSTANTIATE_GPT_BLOCK(double)
#undef STRATA_INSTANTIATE_GPT_BLOCK

}  // namespace strata
